// The JavaScript conventions of static/js (static/js/README.md): `npx eslint@9 static/js`.
const globals = {
  window: "readonly",
  document: "readonly",
  WebSocket: "readonly",
  performance: "readonly",
  FormData: "readonly",
  URLSearchParams: "readonly",
  ResizeObserver: "readonly",
  devicePixelRatio: "readonly",
};

export default [
  {
    files: ["static/js/**/*.js"],
    languageOptions: { ecmaVersion: 2020, sourceType: "script", globals },
    rules: {
      "no-var": "error",
      "prefer-const": "error",
      "no-undef": "error",
      "no-unused-vars": ["error", { caughtErrors: "none" }],
      "no-use-before-define": ["error", { functions: false, classes: true, variables: false }],
      eqeqeq: "error",
      strict: ["error", "function"],
      "func-style": ["error", "declaration"],
      "no-eval": "error",
      "no-implied-eval": "error",
      "no-new-func": "error",
      "no-restricted-properties": [
        "error",
        ...["onopen", "onmessage", "onclose", "onerror", "onclick", "onload"].map((property) => ({
          property,
          message: "Use addEventListener.",
        })),
      ],
      "no-restricted-globals": [
        "error",
        ...["setTimeout", "setInterval", "clearTimeout", "clearInterval", "requestAnimationFrame", "localStorage", "location"].map(
          (name) => ({ name, message: `Use window.${name}.` }),
        ),
      ],
    },
  },
  // The lab page's parts are ES modules (strict by definition: no "use strict").
  {
    files: ["static/js/lab/**/*.js"],
    languageOptions: { ecmaVersion: 2020, sourceType: "module", globals },
    rules: { strict: ["error", "never"] },
  },
];
