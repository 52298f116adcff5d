// The JavaScript conventions of static/js (static/js/README.md): `npx eslint@9 static/js`.
export default [
  {
    files: ["static/js/**/*.js"],
    languageOptions: {
      ecmaVersion: 2020,
      sourceType: "script",
      globals: { window: "readonly", document: "readonly", WebSocket: "readonly", performance: "readonly" },
    },
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
];
