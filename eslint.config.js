import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';
import pluginApi from './packages/plugin-api/package.json' with { type: 'json' };

/** Folders whose every subfolder is one plugin (templates/plugin holds the scaffolder's plugin sources). */
const PLUGIN_FOLDERS = [
  'plugins/**',
  'providers/**',
  'registries/**',
  'attestation/**',
  'templates/plugin/**',
];

/** The plugin API's subpaths (`kit`, `llm`, …), as its package.json exports them. */
const PLUGIN_API_SUBPATHS = Object.keys(pluginApi.exports)
  .filter((entry) => entry.startsWith('./') && entry !== './package.json')
  .map((entry) => entry.slice(2));

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      'packages/*/dist/',
      'data/',
      'bench/results/',
      'conformance-report/',
      'test/.tmp-*/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.strict,
  {
    languageOptions: { globals: globals.node },
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-restricted-imports': [
        'error',
        { patterns: [{ group: ['**/services/**'], message: 'core/ imports nothing from services/.' }] },
      ],
    },
  },
  {
    // A plugin builds against the plugin API alone, as one outside this repository does: no core/, no
    // services/, no other plugin's folder (every plugin folder is flat, so nothing of its own is in ../).
    files: PLUGIN_FOLDERS,
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^\\.\\./',
              message:
                'A plugin imports only @sigil/plugin-api (and its subpaths), node builtins, npm packages and files of its own folder.',
            },
            {
              regex: `^@sigil/plugin-api/(?!(${PLUGIN_API_SUBPATHS.join('|')})$)`,
              message: 'Import the plugin API by the entry points its package.json exports.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['services/**', 'bin/**', 'test/**', 'bench/**', 'conformance/**', 'docs/**'],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', module: 'writable' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    files: ['test/**', 'conformance/**/*.test.ts'],
    rules: {
      '@typescript-eslint/no-unused-expressions': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
