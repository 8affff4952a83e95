/** The part of npm's spec parser this plugin uses: it ships no types. */
declare module 'npm-package-arg' {
  export interface Result {
    /** `version`, `range`, `tag`, `alias`, `git`, `remote`, `file` or `directory`. */
    type: string;
    /** True for a spec the registry answers (`version`, `range`, `tag`, and an alias of one). */
    registry?: boolean;
  }
  const npa: {
    /** Parses `spec` as `package.json` gives it for dependency `name`; throws on an unsupported one. */
    resolve(name: string, spec: string, where?: string): Result;
  };
  export default npa;
}
