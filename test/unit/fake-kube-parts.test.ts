/**
 * The pure parts of the fake Kubernetes API server (test/helpers/fake-kube), held to the rules of
 * the real ones: label and field selectors (labels.Parse, the indexed fields), quantities
 * (resource.ParseQuantity), pod validation messages, the kubelet's phase rules and its
 * environment for a container.
 */
import { ENFORCE_LABEL, podSecurityDenial, podSecurityViolations } from '../helpers/fake-kube/pod-security.js';
import { describe, expect, it } from 'vitest';
import { containerEnv, hostnameOf } from '../helpers/fake-kube/container-env.js';
import { parseFieldSelector } from '../helpers/fake-kube/field-selector.js';
import { parseLabelSelector } from '../helpers/fake-kube/label-selector.js';
import type { KubeObject } from '../helpers/fake-kube/object-store.js';
import { summarizeStatus } from '../helpers/fake-kube/pod-status.js';
import { parseQuantity } from '../helpers/fake-kube/quantity.js';
import { StatusError } from '../helpers/fake-kube/status.js';
import { isValidImageReference, validatePod } from '../helpers/fake-kube/validate-pod.js';

describe('label selectors', () => {
  const labels = { app: 'web', tier: 'front', 'leoflow.io/try': '2' };
  const cases: Array<[string, boolean]> = [
    ['', true],
    ['app=web', true],
    ['app==web', true],
    ['app!=web', false],
    ['app!=db', true],
    ['missing!=x', true],
    ['app in (web, db)', true],
    ['app in (db)', false],
    ['app notin (db)', true],
    ['missing notin (db)', true],
    ['tier', true],
    ['!tier', false],
    ['!missing', true],
    ['app=web,tier=back', false],
    ['leoflow.io/try in (1,2),app', true],
  ];
  for (const [selector, want] of cases) {
    it(`"${selector}" ${want ? 'matches' : 'does not match'}`, () => {
      expect(parseLabelSelector(selector)(labels)).toBe(want);
    });
  }

  it('refuses what labels.Parse refuses, with 400 BadRequest', () => {
    for (const bad of ['app=(x', 'a b c', '=x']) {
      const err = (() => {
        try {
          parseLabelSelector(bad);
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(err, bad).toBeInstanceOf(StatusError);
      expect((err as StatusError).status).toMatchObject({ code: 400, reason: 'BadRequest' });
    }
  });
});

describe('field selectors', () => {
  it('matches the indexed fields and refuses others', () => {
    const pod = {
      metadata: { name: 'p', namespace: 'ns' },
      spec: { nodeName: 'node-1' },
      status: { phase: 'Running' },
    };
    expect(parseFieldSelector('pods', 'metadata.name=p,status.phase!=Pending')(pod)).toBe(true);
    expect(parseFieldSelector('pods', 'spec.nodeName==node-2')(pod)).toBe(false);
    expect(() => parseFieldSelector('pods', 'spec.containers=x')).toThrow('field label not supported: spec.containers');
    const event = { involvedObject: { name: 'p', kind: 'Pod' }, reason: 'Failed', type: 'Warning' };
    expect(parseFieldSelector('events', 'involvedObject.name=p,reason=Failed,type=Warning')(event)).toBe(true);
  });
});

describe('quantities', () => {
  it('reads what resource.ParseQuantity reads', () => {
    expect(parseQuantity('500m')).toBeCloseTo(0.5);
    expect(parseQuantity('2')).toBe(2);
    expect(parseQuantity('1.5')).toBe(1.5);
    expect(parseQuantity('128Mi')).toBe(128 * 2 ** 20);
    expect(parseQuantity('1G')).toBe(1e9);
    expect(parseQuantity('1e3')).toBe(1000);
    expect(parseQuantity('.5')).toBe(0.5);
    for (const bad of ['lots', '1.2.3', 'Mi', '', '1Qi', '--1']) expect(parseQuantity(bad), bad).toBeUndefined();
  });
});

describe('pod validation', () => {
  const ok = { metadata: { name: 'ok' }, spec: { containers: [{ name: 'main', image: 'busybox' }] } };

  it('accepts a minimal pod', () => {
    expect(validatePod(ok)).toEqual([]);
  });

  it('reports each error with its field path and the apimachinery wording', () => {
    const errs = validatePod({
      metadata: { name: 'ok', labels: { 'a/b/c': 'x' } },
      spec: {
        restartPolicy: 'Never',
        terminationGracePeriodSeconds: -1,
        containers: [
          {
            name: 'main',
            image: 'x',
            env: [
              { name: '1BAD', value: 'v' },
              { name: 'S', valueFrom: { secretKeyRef: { name: 's' } } },
            ],
            resources: { requests: { cpu: '2' }, limits: { cpu: '1' } },
          },
          { name: 'main', image: ' ' },
        ],
      },
    });
    const byField = Object.fromEntries(errs.map((e) => [e.field, e]));
    expect(byField['metadata.labels']?.type).toBe('FieldValueInvalid');
    expect(byField['spec.terminationGracePeriodSeconds']?.message).toBe(
      'Invalid value: -1: must be greater than or equal to 0',
    );
    expect(byField['spec.containers[0].env[0].name']?.message).toMatch(
      /^Invalid value: "1BAD": a valid environment variable name must consist of/,
    );
    expect(byField['spec.containers[0].env[1].valueFrom.secretKeyRef.key']?.message).toBe('Required value');
    expect(byField['spec.containers[0].resources.requests']?.message).toBe(
      'Invalid value: "2": must be less than or equal to cpu limit of 1',
    );
    expect(byField['spec.containers[1].name']?.message).toBe('Duplicate value: "main"');
    expect(byField['spec.containers[1].image']?.message).toBe('Required value');
  });

  it('tells valid image references from invalid ones, as the kubelet parses them', () => {
    for (const good of [
      'busybox',
      'busybox:1.36',
      'ghcr.io/leoflow/leoflow:0.1.0',
      'localhost:5000/a/b',
      `x@sha256:${'a'.repeat(64)}`,
    ])
      expect(isValidImageReference(good), good).toBe(true);
    for (const bad of ['Not A Valid/Image', 'library/UPPER', 'a:b:c', 'trailing-/x'])
      expect(isValidImageReference(bad), bad).toBe(false);
  });
});

describe('the kubelet: phase and environment', () => {
  const cs = (state: object, extra: object = {}) => ({ name: 'c', ready: false, restartCount: 0, state, ...extra });

  it('computes the phase as getPhase does', () => {
    const phase = (statuses: object[], policy: string, prior = 'Pending') => {
      const s: any = { phase: prior, containerStatuses: structuredClone(statuses) };
      summarizeStatus(s, policy, false);
      return s.phase;
    };
    expect(phase([cs({ waiting: { reason: 'ContainerCreating' } })], 'Never')).toBe('Pending');
    expect(phase([cs({ running: {} }), cs({ waiting: { reason: 'ImagePullBackOff' } })], 'Never')).toBe('Pending');
    expect(phase([cs({ running: {} }, { ready: true })], 'Never')).toBe('Running');
    expect(phase([cs({ terminated: { exitCode: 0 } })], 'Never')).toBe('Succeeded');
    expect(phase([cs({ terminated: { exitCode: 3 } })], 'Never')).toBe('Failed');
    expect(phase([cs({ terminated: { exitCode: 3 } })], 'OnFailure')).toBe('Running');
    expect(phase([cs({ terminated: { exitCode: 0 } })], 'Always')).toBe('Running');
    expect(
      phase(
        [cs({ waiting: { reason: 'CrashLoopBackOff' } }, { lastState: { terminated: { exitCode: 1 } } })],
        'Always',
      ),
    ).toBe('Running');
    // Terminal phases are final.
    expect(phase([cs({ running: {} })], 'Never', 'Failed')).toBe('Failed');
  });

  it('ends containers at the final report of a deleted pod', () => {
    const s: any = {
      phase: 'Running',
      containerStatuses: [cs({ running: { startedAt: 'x' } }), cs({ waiting: { reason: 'ContainerCreating' } })],
    };
    summarizeStatus(s, 'Never', true);
    expect(s.phase).toBe('Failed');
    expect(s.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 137, reason: 'Error' });
    expect(s.containerStatuses[1].state.terminated).toMatchObject({ exitCode: 137, reason: 'ContainerStatusUnknown' });
    expect(s.conditions.find((c: any) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'PodCompleted',
    });
  });

  it('builds the environment in order, expanding $(VAR) and resolving valueFrom', () => {
    const pod: KubeObject = {
      metadata: { name: 'p1', namespace: 'ns', uid: 'u-1', labels: { app: 'x' } },
      spec: { nodeName: 'node-2', containers: [{ name: 'c', resources: { limits: { cpu: '2' } } }] },
    };
    const sources = {
      baseEnv: { PATH: '/bin' },
      secret: (n: string) => (n === 'db' ? { password: 'pw' } : undefined),
      configMap: () => undefined,
    };
    const spec = {
      name: 'c',
      env: [
        { name: 'A', value: 'one' },
        { name: 'B', value: '$(A)-two-$$(A)-$(NOPE)' },
        { name: 'PW', valueFrom: { secretKeyRef: { name: 'db', key: 'password' } } },
        { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        { name: 'APP', valueFrom: { fieldRef: { fieldPath: "metadata.labels['app']" } } },
        { name: 'CPU', valueFrom: { resourceFieldRef: { resource: 'limits.cpu' } } },
        { name: 'OPT', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'k', optional: true } } },
      ],
    };
    expect(containerEnv(pod, spec, sources)).toEqual({
      env: {
        PATH: '/bin',
        HOSTNAME: 'p1',
        A: 'one',
        B: 'one-two-$(A)-$(NOPE)',
        PW: 'pw',
        NODE: 'node-2',
        APP: 'x',
        CPU: '2',
      },
    });
    expect(
      containerEnv(
        pod,
        { name: 'c', env: [{ name: 'X', valueFrom: { secretKeyRef: { name: 'gone', key: 'k' } } }] },
        sources,
      ),
    ).toEqual({ problem: 'secret "gone" not found' });
    expect(
      containerEnv(
        pod,
        { name: 'c', env: [{ name: 'X', valueFrom: { secretKeyRef: { name: 'db', key: 'user' } } }] },
        sources,
      ),
    ).toEqual({ problem: "couldn't find key user in Secret ns/db" });
  });

  it('cuts the hostname to 63 characters without a trailing dash or dot', () => {
    expect(hostnameOf('short')).toBe('short');
    expect(hostnameOf(`${'a'.repeat(62)}-b`)).toBe('a'.repeat(62));
    expect(hostnameOf(`${'a'.repeat(61)}.-bc`)).toBe('a'.repeat(61));
  });
});

describe('Pod Security admission', () => {
  const container = (securityContext?: object) => ({
    name: 'task',
    image: 'leoflow:1',
    ...(securityContext ? { securityContext } : {}),
  });
  it("refuses, in the admission's words, a pod without the restricted settings", () => {
    expect(podSecurityDenial({ spec: { containers: [container()] } }, { [ENFORCE_LABEL]: 'restricted' })).toBe(
      'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "task" must set securityContext.allowPrivilegeEscalation=false), ' +
        'unrestricted capabilities (container "task" must set securityContext.capabilities.drop=["ALL"]), ' +
        'runAsNonRoot != true (pod or container "task" must set securityContext.runAsNonRoot=true), ' +
        'seccompProfile (pod or container "task" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    );
    // baseline asks for much less; no label, nothing.
    expect(podSecurityDenial({ spec: { containers: [container()] } }, { [ENFORCE_LABEL]: 'baseline' })).toBeUndefined();
    expect(
      podSecurityDenial({ spec: { hostNetwork: true, containers: [container()] } }, { [ENFORCE_LABEL]: 'baseline' }),
    ).toBe('violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)');
    expect(podSecurityDenial({ spec: { containers: [container()] } }, {})).toBeUndefined();
  });

  it('admits the restricted settings at pod or container level, and checks volumes and added capabilities', () => {
    const ok = { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } };
    const pod = {
      spec: {
        securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
        containers: [container(ok)],
      },
    };
    expect(podSecurityViolations(pod, 'restricted')).toEqual([]);
    const bad = {
      spec: {
        ...pod.spec,
        volumes: [
          { name: 'h', hostPath: { path: '/' } },
          { name: 'n', nfs: { server: 'x', path: '/' } },
        ],
        containers: [container({ ...ok, capabilities: { drop: ['ALL'], add: ['SYS_ADMIN'] } })],
      },
    };
    expect(podSecurityViolations(bad, 'restricted')).toEqual([
      'hostPath volumes (volume "h")',
      'restricted volume types (volume "n" uses restricted volume type "nfs")',
      'unrestricted capabilities (container "task" must not include "SYS_ADMIN" in securityContext.capabilities.add)',
    ]);
  });
});
