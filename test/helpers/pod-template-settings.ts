import type { PodSettings } from '../../src/executors/kubernetes/pod-manifest.js';

/** The pod settings the pod-template unit tests render with (install i1, namespace jobs), and `over`. */
export function templateSettings(over: Partial<PodSettings> = {}): PodSettings {
  return {
    install: 'i1',
    namespace: 'jobs',
    image: 'leoflow:1',
    serverUrl: 'http://cp:7070',
    agentCommand: ['leoflow'],
    killGraceMs: 1000,
    ...over,
  };
}
