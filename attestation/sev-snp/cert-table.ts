/**
 * The certificate table of an extended report (configfs-tsm's `auxblob` from the sev_guest provider):
 * entries of a GUID (16 bytes), an offset and a length (u32 little-endian each, from the table's start),
 * ended by an all-zero entry; each certificate X.509 DER (GHCB specification 56421, MSG_REPORT_REQ).
 */

const ENTRY_BYTES = 24;

/** The GUIDs the GHCB specification gives each certificate, as text. */
const ROLES = {
  '63da758d-e664-4564-adc5-f4b93be8accd': 'vcek',
  'a8074bc2-a25a-483e-aae6-39c045a0b8a1': 'vlek',
  '4ab7b379-bbac-4fe4-a02f-05aef327c782': 'ask',
  'c0b406a4-a803-4952-9743-3fb6014cd0ae': 'ark',
} as const;
export type CertificateRole = (typeof ROLES)[keyof typeof ROLES];

/** A GUID's text from its bytes: the first three fields are stored little-endian. */
function guidText(bytes: Uint8Array): string {
  const hex = (from: number, to: number, reversed: boolean) => {
    const part = Buffer.from(bytes.subarray(from, to));
    return (reversed ? part.reverse() : part).toString('hex');
  };
  return [hex(0, 4, true), hex(4, 6, true), hex(6, 8, true), hex(8, 10, false), hex(10, 16, false)].join('-');
}

/**
 * The certificates the table holds, by role; entries of other GUIDs are skipped, an empty table (the
 * host supplied none) holds none. Throws on a malformed table.
 */
export function parseCertificateTable(table: Uint8Array): Partial<Record<CertificateRole, Uint8Array>> {
  if (table.length === 0) return {};
  const view = new DataView(table.buffer, table.byteOffset, table.byteLength);
  const found: Partial<Record<CertificateRole, Uint8Array>> = {};
  for (let at = 0; at + ENTRY_BYTES <= table.length; at += ENTRY_BYTES) {
    const entry = table.subarray(at, at + ENTRY_BYTES);
    if (entry.every((byte) => byte === 0)) return found;
    const offset = view.getUint32(at + 16, true);
    const length = view.getUint32(at + 20, true);
    if (offset + length > table.length)
      throw new Error(`a certificate entry points past the table's ${table.length} bytes`);
    const role = ROLES[guidText(entry.subarray(0, 16)) as keyof typeof ROLES] as CertificateRole | undefined;
    if (role !== undefined) found[role] = table.subarray(offset, offset + length);
  }
  throw new Error('the certificate table has no terminating entry');
}
