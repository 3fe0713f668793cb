// The in-app API reference (/docs): Swagger UI, vendored under /static/vendor, rendering
// the server's own /openapi.json. A file rather than an inline script: the page keeps the
// site's Content-Security-Policy (script-src 'self').
window.addEventListener("DOMContentLoaded", function () {
  window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    docExpansion: "none",
    defaultModelsExpandDepth: 0,
    // Try it out calls this server; the browser's login cookie never authenticates /api,
    // so a call needs "Authorize" with an API key.
    tryItOutEnabled: false,
    validatorUrl: null,
  });
});
