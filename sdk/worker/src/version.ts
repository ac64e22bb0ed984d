/** The SDK's version, sent at registration (kept equal to sdk/worker/package.json by a unit test). */
export const SDK_VERSION = '0.1.0';
