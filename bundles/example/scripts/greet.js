// Shipped with the bundle and stored content-addressed on import; readable by bundle hash or
// name@version and path (BundlesService.readScript).
return { greeting: 'Hello, ' + (inputs.name || 'world') + '!' };
