import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { idempotencyKey } from '../../src/core/idempotency-key.js';
import { installIdentity } from '../../src/db/install-identity.js';
import { applyDag } from '../helpers/applied-dag.js';
import { runEnds } from '../helpers/run-ends.js';
import { agentsOfEachTest, serverForFile } from '../helpers/server-fixture.js';
import { writeTaskScript } from '../helpers/task-script.js';

/**
 * The completion cache and LEOFLOW_IDEMPOTENCY_KEY through a standalone agent (`leoflow agent`):
 * `make` appends its run and key to a file each time its process runs; a cached second run sends
 * the agent nothing for it, and its downstream gets the first run's output in its Assign.
 */
const f = serverForFile({ tmpPrefix: 'leoflow-agent-cache-' });
const agents = agentsOfEachTest(f);

const script = (name: string, body: string) => writeTaskScript(f.tmp, name, body);

describe('the completion cache through an agent', () => {
  it(
    'runs a cached task once, hands its cached output downstream; --no-cache runs it',
    { timeout: 90_000 },
    async () => {
      const ran = path.join(f.tmp, 'ran');
      const make = await script(
        'make.sh',
        `echo "$LEOFLOW_RUN_ID $LEOFLOW_IDEMPOTENCY_KEY" >> "${ran}"\n` +
          `printf '{"run": "%s"}' "$LEOFLOW_RUN_ID" > "$LEOFLOW_OUTPUT"`,
      );
      const use = await script('use.sh', `cp "$LEOFLOW_INPUTS" "${path.join(f.tmp, 'inputs-')}$LEOFLOW_RUN_ID.json"`);
      await applyDag(f.server.url, f.tmp, [
        'dag_id: agent_cache',
        'tasks:',
        '  - id: make',
        '    executor: agents',
        `    command: ["${make}"]`,
        '    cache: { key: [conf.day], ttl: 1h }',
        '  - id: use',
        '    executor: agents',
        `    command: ["${use}"]`,
        '    depends_on: [make]',
      ]);
      await agents.connect('cache-agent');
      const trigger = async (noCache = false) => {
        const runId = (await f.api.workflow.triggerRun({ dagId: 'agent_cache', confJson: '{"day": "d1"}', noCache }))
          .run!.runId;
        expect(await runEnds(f.db.sql, runId, { timeoutMs: 40_000 })).toBe('success');
        return runId;
      };
      const seen = async (runId: string) =>
        JSON.parse(await readFile(path.join(f.tmp, `inputs-${runId}.json`), 'utf8')) as unknown;
      const first = await trigger();
      const second = await trigger();
      expect(await seen(second)).toEqual({ make: { run: first } });
      const third = await trigger(true);
      expect(await seen(third)).toEqual({ make: { run: third } });
      const install = await installIdentity(f.db.sql);
      const lines = (await readFile(ran, 'utf8')).trim().split('\n');
      expect(lines).toEqual([first, third].map((r) => `${r} ${idempotencyKey(install, r, 'make')}`));
    },
  );
});
