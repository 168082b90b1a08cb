import { describe, expect, it } from 'vitest';
import type { TaskDefinition } from '../../src/core/dag-spec.js';
import { downstreamTaskIds } from '../../src/core/downstream.js';

const t = (id: string, dependsOn: string[] = []) => ({ id, dependsOn }) as TaskDefinition;

describe('downstreamTaskIds', () => {
  // a → b → d, a → c → d, d → e; f alone; listed out of dependency order on purpose.
  const tasks = [t('e', ['d']), t('d', ['b', 'c']), t('b', ['a']), t('a'), t('c', ['a']), t('f')];

  it('follows dependencies transitively, each task once, in spec order, without the task itself', () => {
    expect(downstreamTaskIds(tasks, 'a')).toEqual(['e', 'd', 'b', 'c']);
    expect(downstreamTaskIds(tasks, 'c')).toEqual(['e', 'd']);
    expect(downstreamTaskIds(tasks, 'e')).toEqual([]);
    expect(downstreamTaskIds(tasks, 'f')).toEqual([]);
    expect(downstreamTaskIds(tasks, 'nope')).toEqual([]);
  });
});
