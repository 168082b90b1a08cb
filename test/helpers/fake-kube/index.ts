import { FakeKubeApi, type FakeKubeApiOptions } from './fake-kube-api.js';

/**
 * A fake Kubernetes API server for tests (no cluster can run on our machines). The real
 * @kubernetes/client-node (and kubectl) talk to it through `kubeconfigPath`, exactly as to a
 * cluster: plain HTTP by default, or HTTPS with `tls: true` (a fresh CA in the kubeconfig, and
 * `serviceAccountMount()` for `KubeConfig.loadFromCluster(pathPrefix)`).
 *
 * What it serves (core `v1`, JSON; every failure a `Status` with kind, apiVersion, metadata,
 * status, message, reason, details and code, worded as apimachinery words it):
 * - pods: create (201; 409 AlreadyExists; 422 Invalid with one cause per field error; 404 for a
 *   missing namespace; 403 for a missing service account, an RBAC denial or a ResourceQuota), get,
 *   list (label selectors `=`, `==`, `!=`, `in`, `notin`, existence; field selectors on the
 *   indexed fields; limit/continue), delete (grace from DeleteOptions or the query, uid and
 *   resourceVersion preconditions), patch (JSON, merge and strategic merge) and update (PUT)
 *   within what a pod update may change (labels, annotations, images, deadline, added
 *   tolerations: 422 otherwise; a stale resourceVersion: 409), watch, and `pods/{name}/log`;
 * - events (list, get, watch; fieldSelector `involvedObject.name=…`), recorded by the fake
 *   scheduler and kubelet as real ones are (Scheduled, FailedScheduling, Pulling, Pulled, Failed,
 *   BackOff, ErrImageNeverPull, InspectFailed, Created, Started, Killing, DeadlineExceeded), a
 *   repeat counted on the same event;
 * - namespaces and nodes (get, list), discovery (/version, /api, /api/v1, /apis) and server-side
 *   tables (`as=Table`) for kubectl; delete of a collection of pods by selector. Not served: server-side apply, status
 *   subresources, OpenAPI documents (kubectl needs `--validate=false`), other kinds (405 or 404).
 *
 * resourceVersion: one global counter every write bumps (pods and events alike); lists carry it;
 * a DELETED event carries the deletion's version. Watches (`?watch=1` or `/api/v1/watch/…`) send
 * newline-delimited `{"type","object"}` events after `resourceVersion` ('' or '0': the current
 * state as ADDED first; `sendInitialEvents` ends that with an `initial-events-end` BOOKMARK),
 * BOOKMARKs every `bookmarkIntervalMs` with `allowWatchBookmarks=true`, and `timeoutSeconds`. As
 * the watch cache does, a watch from a version older than its window (`historyLimit` changes per
 * resource, or before `compact()`) gets 200 and one ERROR event with a 410 Expired Status, then
 * the end of the stream; a version ahead of the server, after 3 s, an ERROR with 504 Timeout.
 * `compact({ expireWatches: true })` ends the open watches with 410 too (an etcd compaction);
 * `closeWatches()` ends them without an error, as an API server restart does.
 *
 * The fake scheduler binds pods to fake nodes (`nodes`, default 3 × 4 cpu / 8Gi) by cpu/memory
 * requests and nodeSelector; a pod that fits nowhere is Unschedulable with the scheduler's message
 * ("0/3 nodes are available: 3 Insufficient cpu. preemption: …") and tried again as pods end.
 * The fake kubelet ('processes', the default) then pulls per imagePullPolicy (once per node for
 * IfNotPresent; `preloadImage`), and runs each container's `command` + `args` (or the image's
 * entrypoint given by `setImageRule`) as a LOCAL process group with `baseEnv`, HOSTNAME and the
 * container's env. The command is looked up inside the image when the image has a filesystem
 * (`ImageRule.filesystem`; any `…/leoflow:tag` image is modelled from editions/pro/Containerfile:
 * image-filesystem.ts), on the image's PATH, never the host's: not found is runc's StartError. `valueFrom` is resolved, not refused: secretKeyRef/configMapKeyRef from
 * `setSecret`/`setConfigMap` (missing: CreateContainerConfigError until it appears), fieldRef
 * (name, namespace, uid, labels, annotations, nodeName, serviceAccountName, hostIP, podIP) and
 * resourceFieldRef. Images whose name contains `nonexistent`, or a `setImageRule(…, { pullError })`,
 * fail to pull (ErrImagePull, then ImagePullBackOff, retried with back-off); an image that is not a
 * valid reference is InvalidImageName. Exit codes end containers as Completed/Error and pods as
 * Succeeded/Failed (restartPolicy Never), or restart them with CrashLoopBackOff;
 * activeDeadlineSeconds fails the pod with DeadlineExceeded. A graceful delete sets
 * deletionTimestamp (MODIFIED), SIGTERMs the group, SIGKILLs it after the grace, reports the
 * final status and removes the pod (DELETED). `loseNode` turns the pods of a node Unknown
 * (NodeLost, the pre-1.27 shape) and leaves a later graceful delete Terminating;
 * `loseNodeAsCurrent` is the 1.27+ shape (the kubelet silent at once, so deletes stay Terminating
 * in phase Running; Ready=False and unreachable taints after the node monitor's grace period, 40 s
 * unless `notReadyAfterMs`; then DisruptionTarget); `deleteFromOutside` force-deletes; `deleteNode`
 * deletes a Node, and the pod garbage collector force-deletes its pods; `blackHoleWatches` silences
 * the open watches without closing them (a half-open connection); `watchLagMs` delivers watch
 * events late (a watch cache behind the store); `connectionsOpened` counts TCP connections.
 * `labelNamespace(ns, { 'pod-security.kubernetes.io/enforce': 'restricted' })` makes pod creates
 * in it pass Pod Security admission (pod-security.ts), refused with its 403 otherwise.
 * In 'manual' mode no scheduler or kubelet runs: the test drives pods with `setPodStatus`,
 * `bindPod` and `addPodEvent` (in 'processes' mode the kubelet's next report overwrites what
 * setPodStatus changed).
 *
 * Authentication is the kubeconfig's bearer token (none or unknown: 401); `grantToken` adds
 * tokens with RBAC-like rules. Latency (`setLatency`, per verb, before the request is served) and
 * failures (`failNext`: any status with its Status body and Retry-After, or a dropped connection,
 * before or after the request takes effect) are injectable, and `limitInflight` answers 429 past
 * a number of requests served at once, as API Priority and Fairness does. Introspection: `pods()`, `pod()`,
 * `events()`, `createCount()` (successful creates of a name), `createAttempts()`, `postedPodName()` (a pod's name by its labels), `requests()`
 * (verb, path, status, arrival, duration), `openWatches()`, `processes()`, `containerLogs()`.
 * `close()` SIGKILLs every process group it started and waits for each, and closes every
 * connection. A container is its process group: a process that leaves it (setsid) is beyond the
 * fake's reach, where a real runtime would end it with the container's cgroup.
 */
export async function startFakeKubeApi(opts: FakeKubeApiOptions = {}): Promise<FakeKubeApi> {
  const api = new FakeKubeApi(opts);
  await api.listen();
  return api;
}

export { FakeKubeApi };
export type { AccessRule } from './access-control.js';
export type { Verb } from './api-route.js';
export type { FailureRule, FakeKubeApiOptions, RequestRecord } from './fake-kube-api.js';
export type { ImageRule } from './fake-kubelet.js';
export type { NodesOption } from './fake-scheduler.js';
export type { Quota } from './resource-quota.js';
export type { OpenWatch } from './watch-stream.js';
