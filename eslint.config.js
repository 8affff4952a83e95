import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

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
              message: 'Plugins and core import only from core/.',
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
