// The attempts one agent stream holds, as the control plane tracks them: by task instance, with
// each one's log position and whether it was cancelled or is finishing. Its own file: both the
// stream's handle (Assign, Cancel) and its report handling read and change it.
import type { HeldRef } from './heartbeat-buffer.js';

export class StreamAttempts {
  /** By TI id, the attempt this stream holds (assigned, resumed at Hello, or reported Started). */
  readonly held = new Map<string, HeldRef>();
  /**
   * By attempt token, the highest log seq stored with none missing before it, for each attempt
   * this stream may send lines of (assigned or resumed here, and not finished): Log is only
   * stored in order, and LogAck says up to where.
   */
  readonly logSeq = new Map<string, number>();
  /** Tokens of the attempts this stream was sent Cancel for: still reported, not zombies. */
  readonly cancelled = new Set<string>();
  /** Tokens whose Finished arrived and is being written: listed by keepalives until acked. */
  readonly finishing = new Set<string>();
}
