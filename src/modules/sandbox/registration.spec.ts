import { loadBuiltInPlugins } from '../plugins/plugin-registry';

describe('sandboxed plugins', () => {
  it('are found by the plugin registry with their config schemas', () => {
    const byName = new Map(loadBuiltInPlugins().map((p) => [p.name, p]));
    for (const name of ['http', 'script', 'cli']) expect(byName.get(name)?.configSchema).toBeDefined();
    expect(byName.get('http')!.configSchema.safeParse({ url: 'https://example.com' }).success).toBe(true);
    expect(byName.get('script')!.configSchema.safeParse({ code: 'return 1' }).success).toBe(true);
    expect(byName.get('cli')!.configSchema.safeParse({ command: 'echo', args: ['${{ inputs.x }}'] }).success).toBe(
      true,
    );
  });
});
