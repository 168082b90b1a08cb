/**
 * Turns a byte stream (a child's stdout or stderr) into log lines.
 *
 * It splits on the newline byte before decoding: in UTF-8 the byte 0x0A never occurs inside a
 * multi-byte character, so a character cut in two by a chunk boundary is reassembled with its
 * line and never decoded half-way (which would yield U+FFFD).
 */

/** A task that prints a 1 GiB line without a newline must not take the control plane with it. */
export const MAX_LINE_BYTES = 64 * 1024;

export class LineSplitter {
  readonly #maxLineBytes: number;
  #parts: Buffer[] = [];
  #keptBytes = 0;
  /** Bytes of the current line past the cap: counted for the marker, never held in memory. */
  #droppedBytes = 0;

  constructor(maxLineBytes = MAX_LINE_BYTES) {
    this.#maxLineBytes = maxLineBytes;
  }

  /** Returns the lines this chunk completes, in order. */
  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf(0x0a, start);
      this.#append(chunk.subarray(start, nl === -1 ? chunk.length : nl));
      if (nl === -1) break;
      lines.push(this.#take());
      start = nl + 1;
    }
    return lines;
  }

  /** Returns the last line if the stream ended without a newline. */
  end(): string[] {
    return this.#keptBytes > 0 || this.#droppedBytes > 0 ? [this.#take()] : [];
  }

  #append(bytes: Buffer): void {
    const room = this.#maxLineBytes - this.#keptBytes;
    const kept = bytes.length <= room ? bytes : bytes.subarray(0, room);
    if (kept.length > 0) {
      // Copied: a subarray would pin the whole (possibly 64 KiB) chunk until the line completes.
      this.#parts.push(Buffer.from(kept));
      this.#keptBytes += kept.length;
    }
    this.#droppedBytes += bytes.length - kept.length;
  }

  #take(): string {
    let bytes = Buffer.concat(this.#parts, this.#keptBytes);
    let dropped = this.#droppedBytes;
    this.#parts = [];
    this.#keptBytes = 0;
    this.#droppedBytes = 0;
    if (dropped > 0) {
      const cut = completeCharsLength(bytes);
      dropped += bytes.length - cut;
      bytes = bytes.subarray(0, cut);
      return `${bytes.toString('utf8')}… [line truncated: ${dropped} more bytes]`;
    }
    const line = bytes.toString('utf8');
    return line.endsWith('\r') ? line.slice(0, -1) : line;
  }
}

/** Length of `bytes` without a trailing incomplete UTF-8 character (the cap may cut one). */
function completeCharsLength(bytes: Buffer): number {
  let lead = bytes.length - 1;
  while (lead > 0 && ((bytes[lead] ?? 0) & 0xc0) === 0x80) lead--;
  if (lead < 0) return 0;
  const b = bytes[lead] ?? 0;
  const width = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
  return bytes.length - lead >= width ? bytes.length : lead;
}
