/*
 * A page opened by a course launch inside an LMS's iframe, where the browser may keep no
 * cookie of the lab: the launch-scoped token the page carries (base.html's
 * lab-launch-token meta) goes with every request to the launched session's pages (htmx's
 * header, links and plain forms) and, through window.failureLabLaunch.withToken, with the
 * websocket URL. Without the meta it does nothing. CSRF tokens stay as they are.
 */
(function () {
  "use strict";

  const meta = document.querySelector('meta[name="lab-launch-token"]');
  if (!meta) return;

  const TOKEN = meta.content;
  const SCOPE = meta.dataset.scope;
  const SOCKET_SCOPE = "/ws" + SCOPE;
  const PARAM = "launch";
  const HEADER = "X-Lab-Launch";

  // The launched session's pages and its websocket on this host: all the token grants.
  function inScope(url) {
    return url.host === window.location.host &&
      (url.pathname.startsWith(SCOPE) || url.pathname.startsWith(SOCKET_SCOPE));
  }

  function withToken(href) {
    const url = new window.URL(href, window.location.href);
    if (!inScope(url)) return href;
    url.searchParams.set(PARAM, TOKEN);
    return url.toString();
  }

  document.addEventListener("htmx:configRequest", function (event) {
    const url = new window.URL(event.detail.path, window.location.href);
    if (inScope(url)) event.detail.headers[HEADER] = TOKEN;
  });

  document.addEventListener("click", function (event) {
    const link = event.target.closest ? event.target.closest("a[href]") : null;
    if (link && !link.hasAttribute("hx-get")) link.href = withToken(link.href);
  }, true);

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (form.hasAttribute("hx-post") || form.hasAttribute("hx-get")) return;
    form.action = withToken(form.action);
  }, true);

  window.failureLabLaunch = { withToken: withToken };
})();
