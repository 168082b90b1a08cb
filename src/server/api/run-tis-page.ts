import { toBinary } from '@bufbuild/protobuf';
import type { PagedTi, TiPageStart } from '../../db/run-tis-page.js';
import { TaskInstanceSchema, type TaskInstance } from '../../gen/leoflow/v1/types_pb.js';
import { InvalidArgumentError } from './errors.js';
import { RUNS_PAGE_BYTES } from './runs-page.js';
import { tiToProto } from './to-proto.js';

/** The most task instances a GetRun page holds (page_size); 0 asks for as many as fit its bytes. */
export const MAX_TI_PAGE_SIZE = 100_000;
/** Task instances read at once while a page fills: a page cut by its bytes reads little past its end. */
const READ_CHUNK = 10_000;

/**
 * GetRun's page_token: where the last page stopped, `t<id>` after one of the run's own task
 * instances, `m<id>:<index>` after a mapped instance (its mapped task's instance and its index).
 */
export function parseTiPageToken(token: string): TiPageStart | null {
  if (token === '') return null;
  const own = /^t([1-9][0-9]{0,18})$/.exec(token);
  if (own) return { kind: 'own', afterId: own[1]! };
  const mapped = /^m([1-9][0-9]{0,18}):(0|[1-9][0-9]{0,8})$/.exec(token);
  if (mapped) return { kind: 'mapped', parentId: mapped[1]!, afterIndex: Number(mapped[2]) };
  throw new InvalidArgumentError('page_token', 'is not a token GetRun gave (its next_page_token)');
}

function startAfter(ti: PagedTi): TiPageStart {
  return ti.map_parent === null
    ? { kind: 'own', afterId: ti.id }
    : { kind: 'mapped', parentId: ti.map_parent, afterIndex: ti.map_index! };
}

function tokenOf(s: TiPageStart): string {
  return s.kind === 'own' ? `t${s.afterId}` : `m${s.parentId}:${s.afterIndex}`;
}

/**
 * A page of a run's task instances from `start`: `pageSize` of them (0: no count), fewer when their
 * encoded size would pass the page's budget (RUNS_PAGE_BYTES, as ListRuns), with the token of the
 * next page when any are left. The first always goes in, so a page is never empty while some remain.
 * `read` gives at most `limit` task instances from a start, in page order (`runTisPage`).
 */
export async function readTiPage(
  read: (start: TiPageStart | null, limit: number) => Promise<PagedTi[]>,
  start: TiPageStart | null,
  pageSize: number,
): Promise<{ tis: PagedTi[]; protos: TaskInstance[]; nextPageToken: string }> {
  const want = pageSize || MAX_TI_PAGE_SIZE;
  const tis: PagedTi[] = [];
  const protos: TaskInstance[] = [];
  const next = () => ({ tis, protos, nextPageToken: tokenOf(startAfter(tis[tis.length - 1]!)) });
  let bytes = 0;
  let from = start;
  for (;;) {
    const n = Math.min(READ_CHUNK, want - tis.length);
    // One past the chunk tells whether any are left after it.
    const rows = await read(from, n + 1);
    for (const ti of rows.slice(0, n)) {
      const proto = tiToProto(ti);
      // A repeated field's entry: its bytes plus a tag and a length of a few bytes.
      const size = toBinary(TaskInstanceSchema, proto).length + 8;
      if (tis.length > 0 && bytes + size > RUNS_PAGE_BYTES) return next();
      tis.push(ti);
      protos.push(proto);
      bytes += size;
    }
    if (rows.length <= n) return { tis, protos, nextPageToken: '' };
    if (tis.length >= want) return next();
    from = startAfter(tis[tis.length - 1]!);
  }
}
