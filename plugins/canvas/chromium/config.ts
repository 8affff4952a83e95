import { z } from 'zod';

/** `scheme://host[:port]` of http or https, as `new URL(...).origin` writes it. */
export const ORIGIN = z.string().refine((value) => {
  try {
    const url = new URL(value);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.origin === value;
  } catch {
    return false;
  }
}, 'an http or https origin, e.g. http://127.0.0.1:8080 (no path, no trailing slash, lowercase host)');

/** What the operator sets for the `browser-verify` node (`plugins[].options`). */
export const configSchema = z
  .object({
    executablePath: z
      .string()
      .min(1)
      .default('/usr/bin/chromium')
      .describe("The chromium the node drives (Debian's package installs /usr/bin/chromium)"),
    allowedOrigins: z
      .array(ORIGIN)
      .max(100)
      .default([])
      .describe(
        "Origins the browser may reach besides the run's own preview (workspace.previewUrl); every other request is refused",
      ),
    navigationTimeoutMs: z
      .number()
      .int()
      .min(1_000)
      .max(300_000)
      .default(30_000)
      .describe('Longest the page may take to load'),
    timeoutMs: z
      .number()
      .int()
      .min(5_000)
      .max(600_000)
      .default(60_000)
      .describe('Longest one node run may take, browser start and screenshot included'),
    profileRoot: z
      .string()
      .min(1)
      .optional()
      .describe("Where each run's temporary browser profile is made and removed (default: the OS temp dir)"),
  })
  .strict();

export type BrowserVerifyConfig = z.infer<typeof configSchema>;
