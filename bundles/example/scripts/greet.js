// Shipped with the bundle; a `script` step that names it with `scriptRef: scripts/greet.js`
// runs it. `inputs` are the run's inputs, `steps` the upstream steps' outputs.
return { greeting: 'Hello, ' + (inputs.name || 'world') + '!' };
