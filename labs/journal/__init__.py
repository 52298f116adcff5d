"""The journal: the vocabulary the web and worker processes share.

``kinds`` (every kind of row and how it changes the call counts), ``rows`` (a row as a page
shows it), ``store`` (entries, ``append_entries``, ``record``) and ``broadcast`` (the pushes).
"""
