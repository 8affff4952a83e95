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

/**
 * core/ is what services and plugins are composed from, so it imports none of them. A pattern cannot
 * tell the repository's plugins/ from core/plugins/, so each depth of core/ gets the relative prefix
 * that reaches the repository's root from there.
 */
const OUTSIDE_CORE = ['services', 'devchain', 'plugins', 'registries', 'providers', 'attestation'];
const coreStandsAlone = [1, 2, 3, 4].map((depth) => ({
  files: [`core/${'*/'.repeat(depth - 1)}*.ts`],
  rules: {
    'no-restricted-imports': [
      'error',
      {
        patterns: [
          {
            regex: `^(\\.\\./){${depth}}(${OUTSIDE_CORE.join('|')})/`,
            message:
              'core/ imports only core/ and @sigil/plugin-api: services and plugins are composed from it.',
          },
        ],
      },
    ],
  },
}));

export default tseslint.config(
  {
    ignores: [
      'node_modules/',
      'dist/',
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
        {
          patterns: [
            {
              group: ['**/services/**', '**/devchain/**'],
              message: 'Only services import services/ and devchain/.',
            },
          ],
        },
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
    files: ['services/**', 'devchain/**', 'bin/**', 'test/**', 'bench/**', 'conformance/**', 'docs/**'],
    rules: { 'no-restricted-imports': 'off' },
  },
  ...coreStandsAlone,
  {
    // Type-aware: a promise nobody awaits is invisible to tsc, and a response sent before the header an
    // un-awaited call sets is such a promise. tsconfig.json covers every .ts file; the .js, .cjs and .mjs
    // files are in no project, so the rules that need types stay off for them.
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      // Not the callbacks passed as arguments: knex's query builders are thenables, so every grouped
      // where (`.where((q) => q.where(…).orWhere(…))`) and Promise#finally's awaited callback would be
      // flagged, and a JSX attribute is not in this repository.
      '@typescript-eslint/no-misused-promises': [
        'error',
        { checksVoidReturn: { arguments: false, attributes: false } },
      ],
    },
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
