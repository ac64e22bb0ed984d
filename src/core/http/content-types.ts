/** The request body media types the HTTP layer parses (app-factory.ts registers one parser each). */
export const JSON_TYPE = 'application/json';
export const YAML_TYPES = ['application/yaml', 'application/x-yaml', 'text/yaml'];
export const BINARY_TYPES = ['application/gzip', 'application/x-gzip', 'application/x-tar', 'application/octet-stream'];

const FORM_TYPE = 'application/x-www-form-urlencoded';

/** The media type of a Content-Type header value, lowercased, without parameters. */
export function mediaType(header: string): string {
  return header.split(';')[0].trim().toLowerCase();
}

/**
 * The types a route takes, for a 415 message: JSON always, plus the route's declared others (a
 * YAML type stands for its aliases, which are accepted alike).
 */
export function acceptedTypes(declared: readonly string[]): string[] {
  const out = [JSON_TYPE];
  for (const t of declared) {
    for (const x of YAML_TYPES.includes(t) ? YAML_TYPES : [t]) if (!out.includes(x)) out.push(x);
  }
  return out;
}

/** The 415 message: the type refused, what is accepted, and the curl pitfall behind most of them. */
export function unsupportedTypeMessage(type: string | undefined, accepted: readonly string[], where: string): string {
  const refused = type
    ? `content type ${type} is not accepted ${where}`
    : `a body without a content type is not accepted ${where}`;
  const hint =
    type === FORM_TYPE
      ? ` (curl -d sends ${FORM_TYPE}; add -H 'Content-Type: application/json', or application/yaml with --data-binary for a YAML file)`
      : '';
  return `${refused}; accepted: ${accepted.join(', ')}${hint}`;
}

/** Every type some route takes: the 415 raised before routing (no parser for the type) lists them. */
export const PARSED_TYPES = [JSON_TYPE, ...YAML_TYPES, ...BINARY_TYPES];

/**
 * A hint for a YAML body that failed to parse: when it is one line yet reads like a document of
 * several (`key: value` pairs or `- ` items one after another), the newlines were most likely
 * stripped on the way, which `curl -d` does and `curl --data-binary` does not.
 */
export function yamlNewlineHint(text: string): string | undefined {
  if (text.includes('\n') || text.includes('\r')) return undefined;
  const pairs = text.match(/(?:^|\s)[A-Za-z_][\w.-]*:\s/g)?.length ?? 0;
  const items = text.match(/\s-\s/g)?.length ?? 0;
  if (pairs + items < 2) return undefined;
  return 'the body is a single line but reads like a YAML document of several lines: its newlines were likely stripped (curl -d strips them; send the file with curl --data-binary @file.yaml)';
}
