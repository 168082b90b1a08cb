import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { authorize, type AccessRule, type Identity } from './access-control.js';
import { parseRoute, type Route, type Verb } from './api-route.js';
import type { Cluster } from './cluster.js';
import { createPod } from './create-pod.js';
import { deletePod, deletePodRequest, deletePods } from './delete-pod.js';
import { discoveryDocument } from './discovery.js';
import { EventRecorder } from './event-recorder.js';
import { FailureRules, type FailureRule } from './failure-rules.js';
import { FakeKubelet } from './fake-kubelet.js';
import type { ImageRule } from './image-pull.js';
import { ImageRules } from './image-rules.js';
import { FakeScheduler, isTerminal, makeNodes, type NodesOption } from './fake-scheduler.js';
import { writeKubeconfig, writeServiceAccountMount } from './kubeconfig.js';
import { listObjects, waitForListVersion } from './list-objects.js';
import { Namespaces } from './namespaces.js';
import { deleteNode, loseNode, loseNodeAsCurrent } from './node-loss.js';
import { serveNodes } from './node-objects.js';
import { ObjectStore, type KubeObject, type Resource } from './object-store.js';
import { servePodLog } from './pod-log-request.js';
import { PostedPods } from './posted-pods.js';
import { toTable, wantsTable } from './print-table.js';
import type { Quota } from './resource-quota.js';
import { serveWatch } from './serve-watch.js';
import { updatePodRequest } from './update-pod.js';
import { StatusError, methodNotAllowed, notFound, statusFor, tooManyRequests, unauthorized } from './status.js';
import { selfSignedCertificate } from './tls-certificate.js';
import type { WatchStream, OpenWatch } from './watch-stream.js';

export type { FailureRule } from './failure-rules.js';

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
  private readonly cluster: Cluster;
  private readonly scheduler: FakeScheduler | undefined;
  private readonly kubelet: FakeKubelet;
  private server: Server | undefined;
  private caPem = '';
  private readonly sockets = new Set<Socket>();
  private readonly watches = new Set<WatchStream>();
  private readonly namespaces: Namespaces;
  private readonly tokens = new Map<string, { user: string; rules: AccessRule[] }>();
  private readonly quotas = new Map<string, Quota[]>();
  private readonly secrets = new Map<string, Record<string, string>>();
  private readonly configMaps = new Map<string, Record<string, string>>();
  private readonly imageRules = new ImageRules();
  private readonly latency = new Map<string, number>();
  private readonly failures = new FailureRules();
  private inflightLimit: { max: number; retryAfterSeconds: number } | undefined;
  private inflight = 0;
  private readonly log: RequestRecord[] = [];
  private readonly posted = new PostedPods();
  private tmp = '';
  private closed = false;
  /** TCP connections accepted so far (a client without keep-alive opens one per request). */
  connectionsOpened = 0;

  constructor(private readonly opts: FakeKubeApiOptions = {}) {
    this.store = new ObjectStore(1000, opts.historyLimit);
    const recorder = new EventRecorder(this.store);
    this.namespaces = new Namespaces(this.store);
    this.token = opts.token ?? randomBytes(16).toString('hex');
    this.latency.set('*', opts.latencyMs ?? 0);
    for (const ns of opts.namespaces ?? ['default']) this.addNamespace(ns);
    const t = { scheduleMs: 5, startMs: 10, pullMs: 10, backoffMs: 200, configRetryMs: 200, ...opts.timing };
    this.kubelet = new FakeKubelet(this.store, recorder, {
      startDelayMs: t.startMs,
      pullDelayMs: t.pullMs,
      backoffMs: t.backoffMs,
      configRetryMs: t.configRetryMs,
      imageRule: (image) => this.imageRules.ruleFor(image),
      secret: (ns, name) => this.secrets.get(`${ns}/${name}`),
      configMap: (ns, name) => this.configMaps.get(`${ns}/${name}`),
      baseEnv: opts.baseEnv ?? { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/' },
      cwd: opts.cwd ?? process.cwd(),
      onFreed: () => this.scheduler?.retryPending(),
    });
    const manual = opts.kubelet === 'manual';
    if (!manual) {
      this.scheduler = new FakeScheduler(
        this.store,
        recorder,
        makeNodes(opts.nodes ?? { count: 3, cpu: '4', memory: '8Gi' }),
        t.scheduleMs,
        (ns, name) => this.kubelet.admit(ns, name),
      );
    }
    const { store, scheduler, kubelet } = this;
    this.cluster = { store, recorder, scheduler, kubelet, manual, lostNodes: new Set(), timers: new Set() };
  }

  async listen(): Promise<void> {
    this.tmp = await mkdtemp(join(tmpdir(), 'fake-kube-'));
    const handler = (req: IncomingMessage, res: ServerResponse) => void this.handle(req, res);
    let server: Server;
    if (this.opts.tls) {
      const { key, certPem } = await selfSignedCertificate(this.tmp);
      this.caPem = certPem;
      server = createTlsServer({ key, cert: this.caPem }, handler) as unknown as Server;
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
    const server = { url: this.url, caPem: this.caPem };
    return writeServiceAccountMount(this.tmp, server, opts.token ?? this.token, opts.namespace ?? 'default');
  }

  /** A kubeconfig file for this server and `token`, its context selected. */
  async kubeconfigFor(
    token: string,
    name = `user-${this.log.length}-${randomBytes(3).toString('hex')}`,
  ): Promise<string> {
    const server = { url: this.url, caPem: this.opts.tls ? this.caPem : undefined };
    return writeKubeconfig(this.tmp, server, token, name);
  }

  // ---- test controls -------------------------------------------------------------------------

  addNamespace(name: string): void {
    this.namespaces.add(name);
  }

  /** Adds labels to a namespace, e.g. `pod-security.kubernetes.io/enforce: restricted` (then enforced at pod create). */
  labelNamespace(name: string, labels: Record<string, string>): void {
    this.namespaces.addLabels(name, labels);
  }

  addServiceAccount(namespace: string, name: string): void {
    this.namespaces.addServiceAccount(namespace, name);
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
    this.imageRules.add(match, rule);
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
    this.failures.add(rule);
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
    return this.posted.createCount(namespace, name);
  }

  /** Every POST naming this pod, whatever its answer. */
  createAttempts(namespace: string, name: string): number {
    return this.posted.createAttempts(namespace, name);
  }

  /**
   * The name of the first pod POSTed (to this namespace, or to any) with all of these labels,
   * whatever its answer: a name hashing a secret the test does not know is found by its labels.
   */
  postedPodName(labels: Record<string, string>, namespace?: string): string | undefined {
    return this.posted.nameByLabels(labels, namespace);
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
    this.cluster.recorder.record(pod, {
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
    deletePod(this.cluster, namespace, name, opts.gracePeriodSeconds ?? 0);
  }

  /**
   * The node running this pod is lost: its processes die with it (unless `kill: false`, a
   * partition: they go on running unseen), every pod on it turns phase Unknown with Ready=False
   * (NodeLost), no pod is scheduled there any more, and a graceful delete of its pods stays
   * Terminating (no kubelet confirms it) until a force delete.
   */
  loseNode(namespace: string, name: string, opts: { kill?: boolean } = {}): void {
    loseNode(this.cluster, namespace, name, opts);
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
    loseNodeAsCurrent(this.cluster, namespace, name, opts);
  }

  /**
   * The Node object is deleted (an operator who knows the machine is dead, or the cloud node
   * lifecycle controller once the cloud says the instance is gone): the pod garbage collector
   * force-deletes every pod bound to a node that no longer exists ("orphaned" pods), DELETED at once.
   */
  deleteNode(nodeName: string): void {
    deleteNode(this.cluster, nodeName);
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
    for (const t of this.cluster.timers) clearTimeout(t);
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
      const failure = this.failures.take(route);
      if (failure && !failure.afterEffect) return this.fail(res, failure, record);
      authorize(who, route);
      if (route.verb === 'watch') return await this.watch(route, url, res, record);
      if (route.verb === 'list') await waitForListVersion(this.store, url);
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
    if (resource === 'namespaces') return this.namespaces.serve(route);
    if (resource === 'nodes') return serveNodes(this.cluster, route);
    if (route.verb === 'get' && route.subresource === 'log') return servePodLog(this.cluster, route, url);
    if (route.verb === 'list') return [200, listObjects(this.store, resource as Resource, route.namespace, url)];
    if (route.verb === 'get') {
      const o = this.store.get(resource as Resource, route.namespace!, route.name!);
      if (!o) throw notFound(resource, route.name!);
      return [200, o];
    }
    if (resource === 'pods' && route.verb === 'create') return [201, this.createPod(route.namespace, body, url)];
    if (resource === 'pods' && route.verb === 'delete')
      return [200, deletePodRequest(this.cluster, route.namespace!, route.name!, body, url)];
    if (resource === 'pods' && route.verb === 'deletecollection' && route.namespace !== undefined)
      return [200, deletePods(this.cluster, route.namespace, body, url)];
    if (resource === 'pods' && route.name !== undefined && (route.verb === 'patch' || route.verb === 'update'))
      return [200, updatePodRequest(this.store, route, body, contentType)];
    throw methodNotAllowed();
  }

  private createPod(namespace: string | undefined, body: string, url: URL): KubeObject {
    const admission = { namespaces: this.namespaces, quotas: this.quotas, posted: this.posted };
    return createPod(this.cluster, admission, namespace, body, url);
  }

  private async watch(route: Route, url: URL, res: ServerResponse, record: (s: number) => void): Promise<void> {
    const timing = { bookmarkIntervalMs: this.opts.bookmarkIntervalMs ?? 1000, lagMs: this.opts.watchLagMs ?? 0 };
    await serveWatch(this.store, this.watches, timing, route, url, res, record);
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
