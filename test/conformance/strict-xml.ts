/**
 * A small strict XML 1.0 parser for tests: it accepts the subset a JUnit report uses (declaration,
 * elements, attributes, text, character and predefined entity references, comments) and throws on
 * anything not well-formed, so a test can both reject bad escaping and read values back.
 */

export interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  /** The element's own text, entities decoded. */
  text: string;
}

const NAME = /^[A-Za-z_:][-A-Za-z0-9._:]*/;
const XML_CHARS = /^[\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]*$/u;
const PREDEFINED: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

export function parseXml(source: string): XmlElement {
  if (!XML_CHARS.test(source)) throw new Error('contains a character XML 1.0 forbids');
  let at = 0;
  const fail = (why: string): never => {
    throw new Error(`${why} at offset ${at}: ${JSON.stringify(source.slice(at, at + 30))}`);
  };
  const skipSpace = () => {
    while (/\s/.test(source.charAt(at))) at++;
  };
  const name = (): string => {
    const match = NAME.exec(source.slice(at)) ?? fail('expected a name');
    at += match[0].length;
    return match[0];
  };
  const decode = (raw: string): string =>
    raw.replace(/&([^;]*);?/g, (whole, ref: string) => {
      if (!whole.endsWith(';')) fail('unterminated entity reference');
      if (/^#[0-9]+$/.test(ref)) return String.fromCodePoint(Number(ref.slice(1)));
      if (/^#x[0-9a-fA-F]+$/.test(ref)) return String.fromCodePoint(parseInt(ref.slice(2), 16));
      return PREDEFINED[ref] ?? fail(`unknown entity &${ref};`);
    });
  const skipMisc = () => {
    for (;;) {
      skipSpace();
      if (!source.startsWith('<!--', at)) return;
      const end = source.indexOf('-->', at);
      if (end < 0) fail('unterminated comment');
      at = end + 3;
    }
  };
  const element = (): XmlElement => {
    if (source.charAt(at) !== '<') fail('expected <');
    at++;
    const node: XmlElement = { name: name(), attributes: {}, children: [], text: '' };
    for (;;) {
      skipSpace();
      if (source.startsWith('/>', at)) {
        at += 2;
        return node;
      }
      if (source.charAt(at) === '>') {
        at++;
        break;
      }
      const attribute = name();
      skipSpace();
      if (source.charAt(at) !== '=') fail('expected =');
      at++;
      skipSpace();
      const quote = source.charAt(at);
      if (quote !== '"' && quote !== "'") fail('expected a quoted attribute value');
      const end = source.indexOf(quote, at + 1);
      if (end < 0) fail('unterminated attribute value');
      const raw = source.slice(at + 1, end);
      if (raw.includes('<')) fail('< in an attribute value');
      if (attribute in node.attributes) fail(`duplicate attribute ${attribute}`);
      node.attributes[attribute] = decode(raw);
      at = end + 1;
    }
    for (;;) {
      const next = source.indexOf('<', at);
      if (next < 0) fail(`unclosed element <${node.name}>`);
      const raw = source.slice(at, next);
      if (raw.includes(']]>')) fail(']]> in text');
      node.text += decode(raw);
      at = next;
      if (source.startsWith('</', at)) {
        at += 2;
        if (name() !== node.name) fail(`mismatched closing tag for <${node.name}>`);
        skipSpace();
        if (source.charAt(at) !== '>') fail('expected >');
        at++;
        return node;
      }
      if (source.startsWith('<!--', at)) skipMisc();
      else if (source.startsWith('<!', at) || source.startsWith('<?', at)) fail('unsupported markup');
      else node.children.push(element());
    }
  };
  if (source.startsWith('<?xml')) {
    const end = source.indexOf('?>');
    if (end < 0) fail('unterminated XML declaration');
    at = end + 2;
  }
  skipMisc();
  const root = element();
  skipMisc();
  if (at !== source.length) fail('content after the root element');
  return root;
}

/** Every descendant element with that name, depth first. */
export function findAll(root: XmlElement, name: string): XmlElement[] {
  return root.children.flatMap((child) => [...(child.name === name ? [child] : []), ...findAll(child, name)]);
}
