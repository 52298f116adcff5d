"""Static files in production: WhiteNoise's compressed, hashed files, with the lab page's ES
modules' ``import ... from "./x.js"`` rewritten to the hashed names too (static/js/lab/), so a
page never mixes a new module with an old one from a cache. Other packages' scripts keep
their imports as shipped (django-htmx's extensions import a name that is no file)."""

from whitenoise.storage import CompressedManifestStaticFilesStorage

MODULES = "js/lab/"


def _unchanged(match):
    return match["matched"]


class ModuleManifestStorage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's storage with Django's rewriting of module imports, for MODULES only."""

    support_js_module_import_aggregation = True

    def url_converter(self, name, hashed_files, template=None):
        is_import = template is not None and template.startswith(("import", "export"))
        if is_import and not name.startswith(MODULES):
            return _unchanged
        return super().url_converter(name, hashed_files, template)
