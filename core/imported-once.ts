/**
 * A dependency imported at its first use, not at start-up (issue 30): `load` runs once and every
 * later call takes the same module; a failed import is tried again at the next call.
 */
export function importedOnce<T>(load: () => Promise<T>): () => Promise<T> {
  let loading: Promise<T> | undefined;
  return () => {
    loading ??= load().catch((err: unknown) => {
      loading = undefined;
      throw err;
    });
    return loading;
  };
}
