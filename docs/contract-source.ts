import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/**
 * The doc comments of the plugin API's sources, read with the TypeScript compiler: what the generated
 * pages of each plugin kind say about its contract, its lifecycle and its manifest.
 */

export const ROOT = join(import.meta.dirname, '..');

export interface DocumentedMember {
  name: string;
  /** The member as declared, without its doc comment. */
  declaration: string;
  doc: string;
}

export interface DocumentedInterface {
  name: string;
  doc: string;
  members: DocumentedMember[];
}

export interface SourceDocs {
  /** The file, relative to the repository. */
  file: string;
  interfaces: ReadonlyMap<string, DocumentedInterface>;
  /** Every exported interface and type of the file, as written (its doc comment included), in order. */
  declarations: readonly { name: string; text: string }[];
  /** The text of every comment of the file, in order, for finding what a kit check quotes. */
  prose: string;
}

/** A doc comment as markdown: `{@link X}` becomes `X` in code. */
function docOf(node: ts.Node): string {
  return ts
    .getJSDocCommentsAndTags(node)
    .filter(ts.isJSDoc)
    .map((jsDoc) => ts.getTextOfJSDocComment(jsDoc.comment) ?? '')
    .join('\n\n')
    .replace(/\{@link\s+([^}\s]+)\s*\}/g, '`$1`')
    .trim();
}

const nameOf = (member: ts.TypeElement, source: ts.SourceFile): string =>
  member.name ? member.name.getText(source) : member.getText(source);

const isExported = (declaration: ts.InterfaceDeclaration | ts.TypeAliasDeclaration): boolean =>
  declaration.modifiers?.some((modifier) => modifier.kind === ts.SyntaxKind.ExportKeyword) === true;

/** The doc comments of `file`, a path relative to the repository. */
export function readSourceDocs(file: string): SourceDocs {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const interfaces = new Map<string, DocumentedInterface>();
  const declarations: { name: string; text: string }[] = [];
  for (const statement of source.statements) {
    if (!ts.isInterfaceDeclaration(statement) && !ts.isTypeAliasDeclaration(statement)) continue;
    if (!isExported(statement)) continue;
    const name = statement.name.text;
    // From its own doc comment: a file's header comment is in the leading trivia of its first statement.
    const ownDoc = ts.getJSDocCommentsAndTags(statement).filter(ts.isJSDoc).at(-1);
    declarations.push({ name, text: text.slice(ownDoc?.pos ?? statement.getStart(), statement.end) });
    if (!ts.isInterfaceDeclaration(statement)) continue;
    interfaces.set(name, {
      name,
      doc: docOf(statement),
      members: statement.members.map((member) => ({
        name: nameOf(member, source),
        declaration: member.getText(source),
        doc: docOf(member),
      })),
    });
  }
  return { file, interfaces, declarations, prose: commentText(text) };
}

/** Every block comment of `text` without its `*` margins: doc comments on union members included. */
function commentText(text: string): string {
  const scanner = ts.createScanner(ts.ScriptTarget.Latest, false, ts.LanguageVariant.Standard, text);
  const comments: string[] = [];
  for (let token = scanner.scan(); token !== ts.SyntaxKind.EndOfFileToken; token = scanner.scan())
    if (token === ts.SyntaxKind.MultiLineCommentTrivia)
      comments.push(
        scanner
          .getTokenText()
          .replace(/^\/\*\*?|\*\/$/g, '')
          .replace(/^\s*\* ?/gm, ''),
      );
  return comments.join('\n');
}

/** The interface of a contract file that instances implement: the one with a `specVersion`. */
export function contractInterface(docs: SourceDocs): DocumentedInterface {
  const contract = [...docs.interfaces.values()].find((candidate) =>
    candidate.members.some((member) => member.name === 'specVersion'),
  );
  if (!contract) throw new Error(`${docs.file} declares no interface with a specVersion`);
  return contract;
}

/** The interface `name` of `docs`; a clear error when the source no longer declares it. */
export function interfaceOf(docs: SourceDocs, name: string): DocumentedInterface {
  const found = docs.interfaces.get(name);
  if (!found) throw new Error(`${docs.file} declares no interface ${name}`);
  return found;
}

/** A member of an interface; a clear error when it is gone. */
export function memberOf(documented: DocumentedInterface, name: string): DocumentedMember {
  const found = documented.members.find((member) => member.name === name);
  if (!found) throw new Error(`${documented.name} has no member ${name}`);
  return found;
}
