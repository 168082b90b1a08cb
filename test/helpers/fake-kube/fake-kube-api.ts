import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { authorize, type AccessRule, type Identity } from './access-control.js';
import { parseRoute, type Route, type Verb } from './api-route.js';
import { defaultPod } from './default-pod.js';
import { discoveryDocument } from './discovery.js';
import { EventRecorder } from './event-recorder.js';
import { FakeKubelet, type ImageRule } from './fake-kubelet.js';
import { containerfileImage, type ImageFilesystem } from './image-filesystem.js';
import { FakeScheduler, isTerminal, makeNodes, type NodesOption } from './fake-scheduler.js';
import { now } from './timestamp.js';
import { parseFieldSelector } from './field-selector.js';
import { parseLabelSelector } from './label-selector.js';
import { listObjects, stripKind } from './list-objects.js';
import { ObjectStore, type KubeObject, type Resource } from './object-store.js';
import { toTable, wantsTable } from './print-table.js';
import { checkQuotas, type Quota } from './resource-quota.js';
import { podSecurityDenial } from './pod-security.js';
import { applyPatch, checkPodUpdate, patchTypeOf } from './update-pod.js';
import {
  StatusError,
  alreadyExists,
  badRequest,
  forbidden,
  invalidObject,
  methodNotAllowed,
  notFound,
  statusFor,
  tooLargeResourceVersion,
  tooManyRequests,
  unauthorized,
  type StatusDetails,
} from './status.js';
import { validatePod } from './validate-pod.js';
import { WatchStream, type OpenWatch } from './watch-stream.js';

/**
 * A fake Kubernetes API server for `v1` pods and events, spoken to over HTTP by the real
 * @kubernetes/client-node through a kubeconfig. Its answers follow the API reference: Status
 * objects for every failure, 201 on create, watch events as newline-delimited JSON with bookmarks
 * and 410 Expired after compaction, one global resourceVersion. A fake scheduler and kubelet move
 * pods through their phases and run each container's command as a local process; tests inject
 * latency and failures and read back what the server saw. See index.ts for the whole contract.
 */

export interface FakeKubeApiOptions {
  /** Latency added to every request before it is served (default 0). */
  latencyMs?: number;
  /**
   * Serve HTTPS with a fresh self-signed certificate for 127.0.0.1, which the kubeconfig trusts
   * (certificate-authority-data), as a cluster does; needed for `serviceAccountMount()` (in-cluster
   * config). Default false: plain HTTP, the kubeconfig with insecure-skip-tls-verify.
   */
  tls?: boolean;
  /** Namespaces that exist (default ['default']). */
  namespaces?: string[];
  /** The bearer token the kubeconfig carries, with every right (default random). */
  token?: string;
  /** 'processes' (default): the fake scheduler and kubelet move pods and run their commands. 'manual': nothing moves unless the test says so. */
  kubelet?: 'processes' | 'manual';
  /** The fake nodes (default 3 nodes of 4 cpu and 8Gi). */
  nodes?: NodesOption;
  /** How many changes of each resource a watch can start behind (the watch cache window; default 100,000): older resourceVersions get 410 Expired. */
  historyLimit?: number;
  /** How often a watch that allows bookmarks gets one (default 1000 ms; a real server sends one about every minute). */
  bookmarkIntervalMs?: number;
  /**
   * Watch events reach watchers this late (default 0): the API server's watch cache trails its
   * store, so a create is answered before its ADDED event is sent.
   */
  watchLagMs?: number;
  /** Delays of the fake control plane (defaults: schedule 5 ms, kubelet start 10 ms, pull 10 ms, back-off 200 ms, config retry 200 ms). */
  timing?: Partial<{ scheduleMs: number; startMs: number; pullMs: number; backoffMs: number; configRetryMs: number }>;
  /** Environment every container process starts with, before its own env (default PATH and HOME of this process). */
  baseEnv?: Record<string, string>;
  /** Working directory of container processes without a workingDir (default this process's). */
  cwd?: string;
}

export interface FailureRule {
  verb?: Verb | '*';
  resource?: string;
  namespace?: string;
  name?: string;
  /** An HTTP status answered with the matching Status, or 'reset' to drop the connection without an answer. */
  status: number | 'reset';
  reason?: string;
  message?: string;
  retryAfterSeconds?: number;
  details?: StatusDetails;
  /** How many matching requests fail (default 1). */
  times?: number;
  /** Serve the request (its effect happens) and then answer with the failure: a response lost after commit. */
  afterEffect?: boolean;
}

export interface RequestRecord {
  verb: Verb | 'discovery';
  method: string;
  path: string;
  resource?: string;
  namespace?: string;
  name?: string;
  status: number;
  /** When it arrived (epoch ms) and how long it took to answer (including injected latency). */
  at: number;
  durationMs: number;
}

export class FakeKubeApi {
  url = '';
  kubeconfigPath = '';
  readonly token: string;
  private readonly store: ObjectStore;
  private readonly recorder: EventRecorder;
  private readonly scheduler: FakeScheduler | undefined;
  private readonly kubelet: FakeKubelet;
  private server: Server | undefined;
  private caPem = '';
  private readonly sockets = new Set<Socket>();
  private readonly watches = new Set<WatchStream>();
  private readonly namespaces = new Map<string, KubeObject>();
  private readonly serviceAccounts = new Set<string>();
  private readonly tokens = new Map<string, { user: string; rules: AccessRule[] }>();
  private readonly quotas = new Map<string, Quota[]>();
  private readonly secrets = new Map<string, Record<string, string>>();
  private readonly configMaps = new Map<string, Record<string, string>>();
  private readonly imageRules: Array<{ match: string | RegExp; rule: ImageRule }> = [];
  private leoflowImage: ImageFilesystem | undefined;
  /** Nodes lost by loseNodeAsCurrent: a graceful delete of their pods is never confirmed. */
  private readonly lostNodes = new Set<string>();
  private readonly latency = new Map<string, number>();
  private failures: Array<FailureRule & { left: number }> = [];
  private inflightLimit: { max: number; retryAfterSeconds: number } | undefined;
  private inflight = 0;
  private readonly log: RequestRecord[] = [];
  private readonly creates = new Map<string, number>();
  private readonly createPosts = new Map<string, number>();
  /** The labels of every pod name POSTed, by `namespace/name`, in order. */
  private readonly postedLabels = new Map<string, Record<string, string>>();
  private readonly manualTimers = new Set<NodeJS.Timeout>();
  private readonly bookmarkIntervalMs: number;
  private readonly manual: boolean;
  private tmp = '';
  private closed = false;
  /** TCP connections accepted so far (a client without keep-alive opens one per request). */
  connectionsOpened = 0;

  constructor(private readonly opts: FakeKubeApiOptions = {}) {
    this.store = new ObjectStore(1000, opts.historyLimit);
    this.recorder = new EventRecorder(this.store);
    this.token = opts.token ?? randomBytes(16).toString('hex');
    this.manual = opts.kubelet === 'manual';
    this.bookmarkIntervalMs = opts.bookmarkIntervalMs ?? 1000;
    this.latency.set('*', opts.latencyMs ?? 0);
    for (const ns of opts.namespaces ?? ['default']) this.addNamespace(ns);
    const t = { scheduleMs: 5, startMs: 10, pullMs: 10, backoffMs: 200, configRetryMs: 200, ...opts.timing };
    this.kubelet = new FakeKubelet(this.store, this.recorder, {
      startDelayMs: t.startMs,
      pullDelayMs: t.pullMs,
      backoffMs: t.backoffMs,
      configRetryMs: t.configRetryMs,
      imageRule: (image) => this.imageRule(image),
      secret: (ns, name) => this.secrets.get(`${ns}/${name}`),
      configMap: (ns, name) => this.configMaps.get(`${ns}/${name}`),
      baseEnv: opts.baseEnv ?? { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/' },
      cwd: opts.cwd ?? process.cwd(),
      onFreed: () => this.scheduler?.retryPending(),
    });
    if (!this.manual) {
      this.scheduler = new FakeScheduler(
        this.store,
        this.recorder,
        makeNodes(opts.nodes ?? { count: 3, cpu: '4', memory: '8Gi' }),
        t.scheduleMs,
        (ns, name) => this.kubelet.admit(ns, name),
      );
    }
  }

  async listen(): Promise<void> {
    this.tmp = await mkdtemp(join(tmpdir(), 'fake-kube-'));
    const handler = (req: IncomingMessage, res: ServerResponse) => void this.handle(req, res);
    let server: Server;
    if (this.opts.tls) {
      const key = join(this.tmp, 'apiserver.key');
      const cert = join(this.tmp, 'apiserver.crt');
      await promisify(execFile)('openssl', [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-days',
        '2',
        '-keyout',
        key,
        '-out',
        cert,
        '-subj',
        '/CN=kube-apiserver',
        '-addext',
        'subjectAltName=IP:127.0.0.1,DNS:localhost',
      ]);
      this.caPem = await readFile(cert, 'utf8');
      server = createTlsServer({ key: await readFile(key), cert: this.caPem }, handler) as unknown as Server;
    } else {
      server = createServer(handler);
    }
    server.keepAliveTimeout = 60_000;
    server.on('connection', (s: Socket) => {
      this.connectionsOpened++;
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    this.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const addr = server.address();
    if (addr === null || typeof addr === 'string') throw new Error('fake kube api: no address');
    this.url = `${this.opts.tls ? 'https' : 'http'}://127.0.0.1:${addr.port}`;
    this.kubeconfigPath = await this.kubeconfigFor(this.token, 'default');
  }

  /**
   * What a pod's service account mount and environment would give it, for
   * `KubeConfig.loadFromCluster(pathPrefix)` with `env` set in process.env: token, ca.crt and
   * namespace under `<pathPrefix>/var/run/secrets/kubernetes.io/serviceaccount/`. Needs `tls`.
   */
  async serviceAccountMount(
    opts: { namespace?: string; token?: string } = {},
  ): Promise<{ pathPrefix: string; env: { KUBERNETES_SERVICE_HOST: string; KUBERNETES_SERVICE_PORT: string } }> {
    if (!this.opts.tls) throw new Error('fake kube api: in-cluster config needs HTTPS; start it with { tls: true }');
    const pathPrefix = join(this.tmp, `in-cluster-${randomBytes(4).toString('hex')}`);
    const dir = join(pathPrefix, 'var/run/secrets/kubernetes.io/serviceaccount');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'token'), opts.token ?? this.token);
    await writeFile(join(dir, 'ca.crt'), this.caPem);
    await writeFile(join(dir, 'namespace'), opts.namespace ?? 'default');
    const port = new URL(this.url).port;
    return { pathPrefix, env: { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port } };
  }

  /** A kubeconfig file for this server and `token`, its context selected. */
  async kubeconfigFor(
    token: string,
    name = `user-${this.log.length}-${randomBytes(3).toString('hex')}`,
  ): Promise<string> {
    const config = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'fake',
          cluster: this.opts.tls
            ? { server: this.url, 'certificate-authority-data': Buffer.from(this.caPem).toString('base64') }
            : { server: this.url, 'insecure-skip-tls-verify': true },
        },
      ],
      users: [{ name, user: { token } }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: name, namespace: 'default' } }],
      'current-context': 'fake',
    };
    const path = join(this.tmp, `kubeconfig-${name}.json`);
    await writeFile(path, JSON.stringify(config, null, 2));
    return path;
  }

  // ---- test controls -------------------------------------------------------------------------

  addNamespace(name: string): void {
    this.namespaces.set(name, {
      kind: 'Namespace',
      apiVersion: 'v1',
      metadata: {
        name,
        uid: randomUUID(),
        resourceVersion: String(this.store.resourceVersion),
        creationTimestamp: now(),
        labels: { 'kubernetes.io/metadata.name': name },
      },
      spec: { finalizers: ['kubernetes'] },
      status: { phase: 'Active' },
    });
    this.serviceAccounts.add(`${name}/default`);
  }

  /** Adds labels to a namespace, e.g. `pod-security.kubernetes.io/enforce: restricted` (then enforced at pod create). */
  labelNamespace(name: string, labels: Record<string, string>): void {
    const n = this.namespaces.get(name);
    if (!n) throw new Error(`no namespace ${name}`);
    n.metadata.labels = { ...n.metadata.labels, ...labels };
  }

  addServiceAccount(namespace: string, name: string): void {
    this.serviceAccounts.add(`${namespace}/${name}`);
  }

  /** Another bearer token, allowed only what `rules` say (none: it is authenticated and may do nothing). */
  grantToken(token: string, rules: AccessRule[], user = `system:serviceaccount:default:${token.slice(0, 8)}`): void {
    this.tokens.set(token, { user, rules });
  }

  setQuota(namespace: string, quota: Quota): void {
    const list = (this.quotas.get(namespace) ?? []).filter((q) => q.name !== quota.name);
    this.quotas.set(namespace, [...list, quota]);
  }

  setSecret(namespace: string, name: string, data: Record<string, string>): void {
    this.secrets.set(`${namespace}/${name}`, data);
  }

  setConfigMap(namespace: string, name: string, data: Record<string, string>): void {
    this.configMaps.set(`${namespace}/${name}`, data);
  }

  /** A rule for images equal to (string) or matching (RegExp) `match`; the latest added wins. */
  setImageRule(match: string | RegExp, rule: ImageRule): void {
    this.imageRules.unshift({ match, rule });
  }

  /** The image is already on every node: no pull for IfNotPresent, and Never may use it. */
  preloadImage(image: string): void {
    for (const n of this.scheduler?.nodes ?? []) this.kubelet.holdImage(n.name, image);
  }

  setLatency(ms: number, verb?: Verb): void {
    this.latency.set(verb ?? '*', ms);
  }

  /**
   * At most `max` requests served at once (watches aside, as long-running requests): the next one
   * is answered 429 TooManyRequests with Retry-After, as API Priority and Fairness answers when its
   * queues are full. Undefined lifts the limit.
   */
  limitInflight(max: number | undefined, retryAfterSeconds = 1): void {
    this.inflightLimit = max === undefined ? undefined : { max, retryAfterSeconds };
  }

  failNext(rule: FailureRule): void {
    this.failures.push({ ...rule, left: rule.times ?? 1 });
  }

  // ---- introspection -------------------------------------------------------------------------

  pods(namespace?: string): any[] {
    return this.store.list('pods', namespace);
  }

  pod(namespace: string, name: string): any | undefined {
    return this.store.get('pods', namespace, name);
  }

  events(namespace?: string, podName?: string): any[] {
    return this.store.list('events', namespace, (e) => podName === undefined || e.involvedObject?.name === podName);
  }

  /** Successful creates of this pod name (a create answered 409 is not one). */
  createCount(namespace: string, name: string): number {
    return this.creates.get(`${namespace}/${name}`) ?? 0;
  }

  /** Every POST naming this pod, whatever its answer. */
  createAttempts(namespace: string, name: string): number {
    return this.createPosts.get(`${namespace}/${name}`) ?? 0;
  }

  /**
   * The name of the first pod POSTed (to this namespace, or to any) with all of these labels,
   * whatever its answer: a name hashing a secret the test does not know is found by its labels.
   */
  postedPodName(labels: Record<string, string>, namespace?: string): string | undefined {
    for (const [key, have] of this.postedLabels) {
      const [ns, name] = [key.slice(0, key.indexOf('/')), key.slice(key.indexOf('/') + 1)];
      if ((namespace === undefined || ns === namespace) && Object.entries(labels).every(([k, v]) => have[k] === v))
        return name;
    }
    return undefined;
  }

  requests(): RequestRecord[] {
    return [...this.log];
  }

  openWatches(): OpenWatch[] {
    return [...this.watches].map((w) => ({ ...w.info }));
  }

  /** Pids of the container processes now alive. */
  processes(): number[] {
    return this.kubelet.pids();
  }

  resourceVersion(): string {
    return String(this.store.resourceVersion);
  }

  containerLogs(namespace: string, name: string, container?: string): string | undefined {
    return this.kubelet.logs(namespace, name, container);
  }

  // ---- driving pods ----------------------------------------------------------------------------

  /** Replaces the given top-level status fields (manual driving); a MODIFIED event follows. */
  setPodStatus(namespace: string, name: string, status: Record<string, unknown>): void {
    const updated = this.store.update('pods', namespace, name, (p) => {
      p.status = { ...p.status, ...structuredClone(status) };
    });
    if (!updated) throw new Error(`fake kube api: no pod ${namespace}/${name}`);
    if (isTerminal(updated)) this.scheduler?.retryPending();
  }

  /** Sets spec.nodeName (manual driving: the pod is bound, so a delete is graceful). */
  bindPod(namespace: string, name: string, nodeName = 'node-1'): void {
    if (!this.store.update('pods', namespace, name, (p) => (p.spec.nodeName = nodeName)))
      throw new Error(`fake kube api: no pod ${namespace}/${name}`);
  }

  /** An event about a pod, as the scheduler or kubelet would record it (manual driving). */
  addPodEvent(
    namespace: string,
    name: string,
    e: { type?: 'Normal' | 'Warning'; reason: string; message: string; component?: string },
  ): void {
    const pod = this.store.get('pods', namespace, name);
    if (!pod) throw new Error(`fake kube api: no pod ${namespace}/${name}`);
    this.recorder.record(pod, {
      type: e.type ?? 'Warning',
      reason: e.reason,
      message: e.message,
      component: e.component ?? 'kubelet',
    });
  }

  /**
   * Someone else deletes the pod: by default a force delete (`kubectl delete --force
   * --grace-period=0`): its processes are killed and DELETED is sent at once; with a grace period,
   * a graceful delete as `kubectl delete` does.
   */
  deleteFromOutside(namespace: string, name: string, opts: { gracePeriodSeconds?: number } = {}): void {
    if (!this.store.get('pods', namespace, name)) throw new Error(`fake kube api: no pod ${namespace}/${name}`);
    this.deletePod(namespace, name, opts.gracePeriodSeconds ?? 0);
  }

  /**
   * The node running this pod is lost: its processes die with it (unless `kill: false`, a
   * partition: they go on running unseen), every pod on it turns phase Unknown with Ready=False
   * (NodeLost), no pod is scheduled there any more, and a graceful delete of its pods stays
   * Terminating (no kubelet confirms it) until a force delete.
   */
  loseNode(namespace: string, name: string, opts: { kill?: boolean } = {}): void {
    const pod = this.store.get('pods', namespace, name);
    const nodeName = pod?.spec?.nodeName;
    if (!nodeName) throw new Error(`fake kube api: pod ${namespace}/${name} is not on a node`);
    const node = this.scheduler?.nodes.find((n) => n.name === nodeName);
    if (node) node.lost = true;
    const lost = this.kubelet.loseNode(nodeName, opts.kill ?? true);
    const onNode = lost.length > 0 ? lost : [pod];
    for (const p of onNode) {
      if (!isTerminal(p))
        this.recorder.record(p, {
          type: 'Warning',
          reason: 'NodeNotReady',
          message: 'Node is not ready',
          component: 'node-controller',
        });
      this.store.update('pods', p.metadata.namespace!, p.metadata.name, (q) => {
        if (isTerminal(q)) return;
        q.status.phase = 'Unknown';
        q.status.reason = 'NodeLost';
        q.status.message = `Node ${nodeName} which was running pod ${q.metadata.name} is unresponsive`;
        q.status.conditions = (q.status.conditions ?? []).map((c: any) =>
          c.type === 'Ready' ? { ...c, status: 'False', reason: 'NodeLost', lastTransitionTime: now() } : c,
        );
      });
    }
  }

  /**
   * The node running this pod is lost, as Kubernetes 1.27+ reports it: no phase `Unknown` any
   * more. Its kubelet stops at once (a graceful delete of its pods is never confirmed); after the
   * node controller's --node-monitor-grace-period (`notReadyAfterMs`, 40 s by default as in
   * kube-controller-manager) it marks the node's pods Ready=False (their containers' statuses,
   * which only a kubelet writes, stay as they were) and taints the node
   * `node.kubernetes.io/unreachable` (NoSchedule, NoExecute); after the pods' toleration of it
   * (`evictAfterMs`, 300 s by the DefaultTolerationSeconds admission) the taint manager adds the
   * DisruptionTarget condition (DeletionByTaintManager) and deletes them gracefully, and with no
   * kubelet to confirm, they stay Terminating in phase Running until a force delete.
   */
  loseNodeAsCurrent(
    namespace: string,
    name: string,
    opts: { kill?: boolean; notReadyAfterMs?: number; evictAfterMs?: number } = {},
  ): void {
    const pod = this.store.get('pods', namespace, name);
    const nodeName = pod?.spec?.nodeName;
    if (!nodeName) throw new Error(`fake kube api: pod ${namespace}/${name} is not on a node`);
    this.lostNodes.add(nodeName);
    const node = this.scheduler?.nodes.find((n) => n.name === nodeName);
    if (node) node.lost = true;
    this.kubelet.loseNode(nodeName, opts.kill ?? true);
    const marked = setTimeout(() => {
      this.manualTimers.delete(marked);
      this.markNodeNotReady(nodeName, opts.evictAfterMs ?? 300_000);
    }, opts.notReadyAfterMs ?? 40_000);
    this.manualTimers.add(marked);
  }

  /**
   * The Node object is deleted (an operator who knows the machine is dead, or the cloud node
   * lifecycle controller once the cloud says the instance is gone): the pod garbage collector
   * force-deletes every pod bound to a node that no longer exists ("orphaned" pods), DELETED at once.
   */
  deleteNode(nodeName: string): void {
    this.lostNodes.delete(nodeName);
    const nodes = this.scheduler?.nodes;
    const i = nodes?.findIndex((n) => n.name === nodeName) ?? -1;
    if (nodes && i >= 0) nodes.splice(i, 1);
    for (const p of this.store.list('pods', undefined, (q) => q.spec?.nodeName === nodeName))
      this.deletePod(p.metadata.namespace!, p.metadata.name, 0);
  }

  /** The node controller's part of a lost node (loseNodeAsCurrent): Ready=False, the taints, then the taint manager. */
  private markNodeNotReady(nodeName: string, evictAfterMs: number): void {
    const node = this.scheduler?.nodes.find((n) => n.name === nodeName);
    if (node) {
      const timeAdded = now();
      node.taints.push(
        { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule', timeAdded } as never,
        { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute', timeAdded } as never,
      );
    }
    // Every pod bound to the node, whoever started it (the kubelet, or a test driving it by hand).
    const onNode = this.store.list('pods', undefined, (p) => p.spec?.nodeName === nodeName && !isTerminal(p));
    for (const p of onNode) {
      this.recorder.record(p, {
        type: 'Warning',
        reason: 'NodeNotReady',
        message: 'Node is not ready',
        component: 'node-controller',
      });
      this.store.update('pods', p.metadata.namespace!, p.metadata.name, (q) => {
        q.status.conditions = (q.status.conditions ?? []).map((c: any) =>
          c.type === 'Ready' && c.status !== 'False' ? { ...c, status: 'False', lastTransitionTime: now() } : c,
        );
      });
    }
    const t = setTimeout(() => {
      this.manualTimers.delete(t);
      for (const p of onNode) {
        const ns = p.metadata.namespace!;
        if (!this.store.get('pods', ns, p.metadata.name)) continue;
        this.store.update('pods', ns, p.metadata.name, (q) => {
          q.status.conditions = [
            ...(q.status.conditions ?? []),
            {
              type: 'DisruptionTarget',
              status: 'True',
              reason: 'DeletionByTaintManager',
              message: 'Taint manager: deleting due to NoExecute taint',
              lastTransitionTime: now(),
            },
          ];
        });
        this.recorder.record(p, {
          type: 'Normal',
          reason: 'TaintManagerEviction',
          message: `Marking for deletion Pod ${ns}/${p.metadata.name}`,
          component: 'taint-controller',
        });
        this.deletePod(ns, p.metadata.name, undefined);
      }
    }, evictAfterMs);
    this.manualTimers.add(t);
  }

  /**
   * Compaction: every resourceVersion up to now is gone, so a watch or a continue from one gets
   * 410 Expired. `expireWatches` also ends the open watches with the ERROR event an etcd-backed
   * watch gets when its revision is compacted.
   */
  compact(opts: { expireWatches?: boolean } = {}): void {
    this.store.compact();
    if (opts.expireWatches) for (const w of [...this.watches]) w.expire();
  }

  /**
   * Ends every open watch from the server's side (the client must watch again): cleanly, as an API
   * server ends a watch at its timeout, or with `abrupt` by dropping the connection mid-stream, as
   * a restart or a network cut does (client-node's Watch then reports an error, not a clean end).
   */
  closeWatches(opts: { abrupt?: boolean } = {}): void {
    for (const w of [...this.watches]) {
      if (opts.abrupt) w.reset();
      else w.close();
    }
  }

  /** Every open watch goes silent without closing (a half-open connection); watches opened later work. */
  blackHoleWatches(): void {
    for (const w of [...this.watches]) w.blackHole();
  }

  /** Kills every process the fake started (by pid, whole groups), closes every connection and removes the kubeconfigs. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.scheduler?.close();
    for (const t of this.manualTimers) clearTimeout(t);
    for (const w of [...this.watches]) w.close();
    await this.kubelet.close();
    const server = this.server;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of this.sockets) s.destroy();
      });
    }
    if (this.tmp) await rm(this.tmp, { recursive: true, force: true });
  }

  // ---- serving -------------------------------------------------------------------------------

  private imageRule(image: string): ImageRule {
    for (const { match, rule } of this.imageRules) {
      if (typeof match === 'string' ? match === image : match.test(image)) return rule;
    }
    // The Leoflow image (any registry, any tag) is the one editions/pro/Containerfile builds.
    if (/^(?:[^/]+\/)*leoflow(?:[:@]|$)/.test(image))
      return { filesystem: (this.leoflowImage ??= containerfileImage()) };
    if (image.includes('nonexistent')) {
      const repo = image.includes('/') ? image : `docker.io/library/${image}`;
      return {
        pullError: `rpc error: code = NotFound desc = failed to pull and unpack image "${repo}": failed to resolve reference "${repo}": ${repo}: not found`,
      };
    }
    return {};
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const at = Date.now();
    const url = new URL(req.url ?? '/', 'http://fake');
    let route: Route | undefined;
    let counted = false;
    const record = (status: number) => {
      const r: RequestRecord = {
        verb: route?.verb ?? 'discovery',
        method: req.method ?? 'GET',
        path: url.pathname + url.search,
        status,
        at,
        durationMs: Date.now() - at,
      };
      if (route?.resource) r.resource = route.subresource ? `${route.resource}/${route.subresource}` : route.resource;
      if (route?.namespace) r.namespace = route.namespace;
      if (route?.name) r.name = route.name;
      this.log.push(r);
    };
    try {
      route = parseRoute(req.method ?? 'GET', url);
      const body = await readBody(req);
      if (route.discovery === 'public')
        return this.reply(res, 200, discoveryDocument(url.pathname, new URL(this.url).host), record);
      const who = this.authenticate(req);
      if (route.verb !== 'watch' && this.inflightLimit !== undefined) {
        // API Priority and Fairness, reduced to one queue without waiting: past the limit, 429.
        if (this.inflight >= this.inflightLimit.max) throw tooManyRequests(this.inflightLimit.retryAfterSeconds);
        this.inflight++;
        counted = true;
      }
      const delay = this.latency.get(route.verb) ?? this.latency.get('*') ?? 0;
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      if (this.closed) return void res.destroy();
      const failure = this.takeFailure(route);
      if (failure && !failure.afterEffect) return this.fail(res, failure, record);
      authorize(who, route);
      if (route.verb === 'watch') return await this.watch(route, url, res, record);
      if (route.verb === 'list') await this.waitForListVersion(url);
      let [code, payload] = this.serve(route, url, body, req.headers['content-type']);
      if (failure) return this.fail(res, failure, record);
      if (
        (route.verb === 'list' || route.verb === 'get') &&
        !route.subresource &&
        (route.resource === 'pods' || route.resource === 'events') &&
        wantsTable(req.headers.accept)
      ) {
        const p = payload as any;
        const items = route.verb === 'list' ? p.items : [p];
        payload = toTable(
          route.resource,
          items,
          route.verb === 'list' ? p.metadata.resourceVersion : p.metadata.resourceVersion,
        );
      }
      this.reply(res, code, payload, record);
    } catch (err) {
      if (err instanceof StatusError) return this.reply(res, err.code, err.status, record, err.headers());
      this.reply(res, 500, statusFor(500, String((err as Error)?.stack ?? err)).status, record);
    } finally {
      if (counted) this.inflight--;
    }
  }

  private reply(
    res: ServerResponse,
    code: number,
    payload: unknown,
    record: (s: number) => void,
    headers: Record<string, string> = {},
  ): void {
    record(code);
    if (res.headersSent) return void res.end();
    const text = typeof payload === 'string' ? payload : JSON.stringify(payload);
    res.writeHead(code, {
      'Content-Type': typeof payload === 'string' ? 'text/plain' : 'application/json',
      'Cache-Control': 'no-cache, private',
      ...headers,
    });
    res.end(text);
  }

  private fail(res: ServerResponse, f: FailureRule, record: (s: number) => void): void {
    if (f.status === 'reset') {
      record(0);
      res.socket?.destroy();
      return;
    }
    const details =
      f.retryAfterSeconds !== undefined ? { ...f.details, retryAfterSeconds: f.retryAfterSeconds } : f.details;
    const err = statusFor(f.status, f.message, details, f.reason);
    this.reply(res, f.status, err.status, record, err.headers());
  }

  private takeFailure(route: Route): FailureRule | undefined {
    const i = this.failures.findIndex(
      (f) =>
        (f.verb === undefined || f.verb === '*' || f.verb === route.verb) &&
        (f.resource === undefined || f.resource === route.resource) &&
        (f.namespace === undefined || f.namespace === route.namespace) &&
        (f.name === undefined || f.name === route.name),
    );
    if (i < 0) return undefined;
    const f = this.failures[i]!;
    if (--f.left <= 0) this.failures.splice(i, 1);
    return f;
  }

  private authenticate(req: IncomingMessage): Identity {
    const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    if (!m) throw unauthorized();
    if (m[1] === this.token) return { user: 'kubernetes-admin', rules: 'all' };
    const t = this.tokens.get(m[1]!);
    if (!t) throw unauthorized();
    return t;
  }

  private serve(route: Route, url: URL, body: string, contentType?: string): [number, unknown] {
    if (route.discovery !== undefined) return [200, discoveryDocument(url.pathname, new URL(this.url).host)];
    const resource = route.resource!;
    if (resource === 'namespaces') return this.serveNamespaces(route);
    if (resource === 'nodes') return this.serveNodes(route);
    if (route.verb === 'get' && route.subresource === 'log') return this.serveLog(route, url);
    if (route.verb === 'list') return [200, listObjects(this.store, resource as Resource, route.namespace, url)];
    if (route.verb === 'get') {
      const o = this.store.get(resource as Resource, route.namespace!, route.name!);
      if (!o) throw notFound(resource, route.name!);
      return [200, o];
    }
    if (resource === 'pods' && route.verb === 'create') return [201, this.createPod(route.namespace, body, url)];
    if (resource === 'pods' && route.verb === 'delete')
      return [200, this.deletePodRequest(route.namespace!, route.name!, body, url)];
    if (resource === 'pods' && route.verb === 'deletecollection' && route.namespace !== undefined)
      return [200, this.deletePods(route.namespace, body, url)];
    if (resource === 'pods' && route.name !== undefined && (route.verb === 'patch' || route.verb === 'update'))
      return [200, this.updatePod(route, body, contentType)];
    throw methodNotAllowed();
  }

  private serveNamespaces(route: Route): [number, unknown] {
    if (route.verb === 'get') {
      const ns = this.namespaces.get(route.name!);
      if (!ns) throw notFound('namespaces', route.name!);
      return [200, ns];
    }
    if (route.verb === 'list') {
      return [
        200,
        {
          kind: 'NamespaceList',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(this.store.resourceVersion) },
          items: [...this.namespaces.values()].map(stripKind),
        },
      ];
    }
    throw methodNotAllowed();
  }

  private serveNodes(route: Route): [number, unknown] {
    const nodes = (this.scheduler?.nodes ?? []).map((n) => ({
      kind: 'Node',
      apiVersion: 'v1',
      metadata: { name: n.name, labels: n.labels, resourceVersion: String(this.store.resourceVersion) },
      spec: n.lost ? { taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' }] } : {},
      status: {
        capacity: { cpu: n.cpu, memory: n.memory, pods: String(n.pods) },
        allocatable: { cpu: n.cpu, memory: n.memory, pods: String(n.pods) },
        conditions: [
          { type: 'Ready', status: n.lost ? 'Unknown' : 'True', reason: n.lost ? 'NodeStatusUnknown' : 'KubeletReady' },
        ],
      },
    }));
    if (route.verb === 'get') {
      const n = nodes.find((x) => x.metadata.name === route.name);
      if (!n) throw notFound('nodes', route.name!);
      return [200, n];
    }
    if (route.verb === 'list')
      return [
        200,
        {
          kind: 'NodeList',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(this.store.resourceVersion) },
          items: nodes.map(stripKind),
        },
      ];
    throw methodNotAllowed();
  }

  private serveLog(route: Route, url: URL): [number, unknown] {
    const pod = this.store.get('pods', route.namespace!, route.name!);
    if (!pod) throw notFound('pods', route.name!);
    const container = url.searchParams.get('container') ?? undefined;
    const names = pod.spec.containers.map((c: any) => c.name);
    if (container === undefined && names.length > 1) {
      throw badRequest(`a container name must be specified for pod ${route.name}, choose one of: [${names.join(' ')}]`);
    }
    const name = container ?? names[0];
    if (!names.includes(name)) throw badRequest(`container ${name} is not valid for pod ${route.name}`);
    const text = this.kubelet.logs(route.namespace!, route.name!, name);
    if (text === undefined) {
      const waiting =
        pod.status?.containerStatuses?.find((c: any) => c.name === name)?.state?.waiting?.reason ?? 'ContainerCreating';
      throw badRequest(`container "${name}" in pod "${route.name}" is waiting to start: ${waiting}`);
    }
    // The kubelet's order: the last tailLines lines, then at most limitBytes of them (a cut line
    // included, as the API reference warns).
    const tail = url.searchParams.get('tailLines');
    const lines =
      tail !== null
        ? text
            .split('\n')
            .slice(-(Number(tail) + 1))
            .join('\n')
        : text;
    const limit = url.searchParams.get('limitBytes');
    if (limit !== null && !(Number.isInteger(Number(limit)) && Number(limit) > 0))
      throw badRequest(`limitBytes: Invalid value: ${limit}: must be greater than 0`);
    return [200, limit !== null ? Buffer.from(lines).subarray(0, Number(limit)).toString() : lines];
  }

  /**
   * A list at `resourceVersion=N` (NotOlderThan) must be at least that fresh: the server waits up
   * to 3 s for a version it has not reached, then answers 504 Timeout (the watch cache's rule).
   */
  private async waitForListVersion(url: URL): Promise<void> {
    const rv = url.searchParams.get('resourceVersion');
    if (!rv || rv === '0' || !/^\d+$/.test(rv) || url.searchParams.get('resourceVersionMatch') === 'Exact') return;
    const deadline = Date.now() + 3000;
    while (this.store.resourceVersion < Number(rv)) {
      if (Date.now() > deadline) throw tooLargeResourceVersion(Number(rv), this.store.resourceVersion);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  private createPod(namespace: string | undefined, body: string, url: URL): KubeObject {
    let input: any;
    try {
      input = JSON.parse(body);
    } catch (err) {
      throw badRequest(`couldn't get version/kind; json parse error: ${(err as Error).message}`);
    }
    if (typeof input !== 'object' || input === null || Array.isArray(input))
      throw badRequest(
        'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf',
      );
    if (input.kind !== undefined && input.kind !== 'Pod')
      throw badRequest(
        `the API version in the data (${input.apiVersion}) does not match the expected API version (v1)`,
      );
    const ns = namespace!;
    if (input.metadata?.namespace !== undefined && input.metadata.namespace !== '' && input.metadata.namespace !== ns) {
      throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
    }
    input.metadata ??= {};
    if (!input.metadata.name && input.metadata.generateName)
      input.metadata.name = `${input.metadata.generateName}${randomBytes(3).toString('hex').slice(0, 5)}`;
    const name: string = input.metadata.name ?? '';
    if (name) {
      this.createPosts.set(`${ns}/${name}`, (this.createPosts.get(`${ns}/${name}`) ?? 0) + 1);
      if (input.metadata.labels && typeof input.metadata.labels === 'object')
        this.postedLabels.set(`${ns}/${name}`, { ...input.metadata.labels });
    }
    if (!this.namespaces.has(ns)) throw notFound('namespaces', ns);
    const sa = input.spec?.serviceAccountName ?? input.spec?.serviceAccount ?? 'default';
    if (typeof sa === 'string' && !this.serviceAccounts.has(`${ns}/${sa}`)) {
      throw forbidden(
        'pods',
        name || undefined,
        `error looking up service account ${ns}/${sa}: serviceaccount "${sa}" not found`,
      );
    }
    const errors = validatePod(input);
    if (errors.length > 0) throw invalidObject('Pod', name, errors);
    const pod = defaultPod(input, ns);
    // Pod Security admission runs before ResourceQuota, as the API server's admission chain orders them.
    const security = podSecurityDenial(pod, this.namespaces.get(ns)?.metadata.labels);
    if (security) throw forbidden('pods', name, security);
    const quotas = this.quotas.get(ns) ?? [];
    const quotaError =
      quotas.length > 0
        ? checkQuotas(
            quotas,
            pod,
            this.store.scan('pods', ns, (p) => !isTerminal(p)),
          )
        : undefined;
    if (quotaError) throw forbidden('pods', name, quotaError);
    if (this.store.get('pods', ns, name)) throw alreadyExists('pods', name);
    if (url.searchParams.getAll('dryRun').includes('All')) return { ...pod, kind: 'Pod', apiVersion: 'v1' };
    const created = this.store.create('pods', pod);
    this.creates.set(`${ns}/${name}`, (this.creates.get(`${ns}/${name}`) ?? 0) + 1);
    this.scheduler?.enqueue(ns, name);
    return created;
  }

  /** PATCH or PUT of a pod: its metadata, container images, deadline and added tolerations may change. */
  private updatePod(route: Route, body: string, contentType: string | undefined): KubeObject {
    const ns = route.namespace!;
    const old = this.store.get('pods', ns, route.name!);
    if (!old) throw notFound('pods', route.name!);
    let next: KubeObject;
    if (route.verb === 'patch') next = applyPatch(old, patchTypeOf(contentType), body);
    else {
      try {
        next = JSON.parse(body);
      } catch (err) {
        throw badRequest(`couldn't get version/kind; json parse error: ${(err as Error).message}`);
      }
      if (!next?.metadata?.resourceVersion) {
        throw invalidObject('Pod', route.name!, [
          {
            type: 'FieldValueInvalid',
            field: 'metadata.resourceVersion',
            message: 'Invalid value: 0x0: must be specified for an update',
          },
        ]);
      }
    }
    const stored = checkPodUpdate(old, next);
    return this.store.update('pods', ns, route.name!, (p) => {
      p.metadata = stored.metadata;
      p.spec = stored.spec;
    })!;
  }

  /** DELETE on the collection: every pod the selectors match is deleted as one DELETE would; the answer lists them. */
  private deletePods(namespace: string, body: string, url: URL): unknown {
    const list = listObjects(this.store, 'pods', namespace, url) as {
      metadata: Record<string, unknown>;
      items: KubeObject[];
    };
    const items = list.items.map((p) => stripKind(this.deletePodRequest(namespace, p.metadata.name, body, url)));
    return {
      kind: 'PodList',
      apiVersion: 'v1',
      metadata: { resourceVersion: String(this.store.resourceVersion) },
      items,
    };
  }

  private deletePodRequest(namespace: string, name: string, body: string, url: URL): KubeObject {
    let options: any = {};
    if (body.trim() !== '') {
      try {
        options = JSON.parse(body) ?? {};
      } catch (err) {
        throw badRequest(`couldn't get version/kind; json parse error: ${(err as Error).message}`);
      }
    }
    const pod = this.store.get('pods', namespace, name);
    if (!pod) throw notFound('pods', name);
    const pre = options.preconditions ?? {};
    if (pre.uid && pre.uid !== pod.metadata.uid) {
      throw statusFor(
        409,
        `Operation cannot be fulfilled on pods "${name}": Precondition failed: UID in precondition: ${pre.uid}, UID in object meta: ${pod.metadata.uid}`,
        { name, kind: 'pods' },
        'Conflict',
      );
    }
    if (pre.resourceVersion && pre.resourceVersion !== pod.metadata.resourceVersion) {
      throw statusFor(
        409,
        `Operation cannot be fulfilled on pods "${name}": Precondition failed: ResourceVersion in precondition: ${pre.resourceVersion}, ResourceVersion in object meta: ${pod.metadata.resourceVersion}`,
        { name, kind: 'pods' },
        'Conflict',
      );
    }
    const q = url.searchParams.get('gracePeriodSeconds');
    const grace = options.gracePeriodSeconds ?? (q !== null ? Number(q) : undefined);
    if (grace !== undefined && (!Number.isInteger(grace) || grace < 0))
      throw badRequest(`invalid gracePeriodSeconds: ${grace}`);
    return this.deletePod(namespace, name, grace);
  }

  /**
   * The pod strategy's graceful delete: an unscheduled or finished pod, or grace 0, goes at once;
   * otherwise deletionTimestamp and deletionGracePeriodSeconds are set (MODIFIED) and the kubelet
   * stops the pod and removes it. A later delete may only shorten the grace.
   */
  private deletePod(namespace: string, name: string, requestedGrace: number | undefined): KubeObject {
    const pod = this.store.get('pods', namespace, name)!;
    let grace = requestedGrace ?? pod.spec.terminationGracePeriodSeconds ?? 30;
    if (!pod.spec.nodeName || isTerminal(pod)) grace = 0;
    if (grace === 0) {
      const gone = this.store.remove('pods', namespace, name)!;
      this.kubelet.forget(namespace, name);
      this.scheduler?.retryPending();
      return gone;
    }
    const current = pod.metadata.deletionGracePeriodSeconds as number | undefined;
    const deadline = pod.metadata.deletionTimestamp ? Date.parse(pod.metadata.deletionTimestamp) : Infinity;
    if (current !== undefined && Date.now() + grace * 1000 >= deadline) return pod;
    const updated = this.store.update('pods', namespace, name, (p) => {
      p.metadata.deletionTimestamp = new Date(Date.now() + grace * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
      p.metadata.deletionGracePeriodSeconds = grace;
    })!;
    if (this.lostNodes.has(pod.spec.nodeName)) {
      // No kubelet confirms it: Terminating until a force delete.
    } else if (this.manual) {
      const t = setTimeout(() => {
        this.manualTimers.delete(t);
        this.store.remove('pods', namespace, name);
      }, grace * 1000);
      this.manualTimers.add(t);
    } else {
      this.kubelet.terminate(namespace, name, grace);
    }
    return updated;
  }

  private async watch(route: Route, url: URL, res: ServerResponse, record: (s: number) => void): Promise<void> {
    const resource = route.resource as Resource;
    if (resource !== 'pods' && resource !== 'events') throw methodNotAllowed();
    const p = url.searchParams;
    let fieldSelector = p.get('fieldSelector') ?? undefined;
    if (route.name !== undefined)
      fieldSelector = [fieldSelector, `metadata.name=${route.name}`].filter(Boolean).join(',');
    const timeout = p.get('timeoutSeconds');
    const req: ConstructorParameters<typeof WatchStream>[1] = {
      resource,
      labels: parseLabelSelector(p.get('labelSelector')),
      fields: parseFieldSelector(resource, fieldSelector),
      resourceVersion: p.get('resourceVersion') ?? '',
      allowBookmarks: ['1', 'true'].includes(p.get('allowWatchBookmarks') ?? ''),
      sendInitialEvents: p.get('sendInitialEvents') === 'true',
      bookmarkIntervalMs: this.bookmarkIntervalMs,
      lagMs: this.opts.watchLagMs ?? 0,
    };
    if (route.namespace !== undefined) req.namespace = route.namespace;
    if (timeout !== null) req.timeoutSeconds = Number(timeout);
    const ls = p.get('labelSelector');
    if (ls) req.labelSelector = ls;
    if (fieldSelector) req.fieldSelector = fieldSelector;
    const w = new WatchStream(this.store, req, res, (x) => this.watches.delete(x));
    this.watches.add(w);
    try {
      await w.start();
      record(200);
    } catch (err) {
      this.watches.delete(w);
      throw err;
    }
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
