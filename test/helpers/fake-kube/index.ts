import { FakeKubeApi, type FakeKubeApiOptions } from './fake-kube-api.js';

/**
 * A fake Kubernetes API server for tests (no cluster can run on our machines). The real
 * @kubernetes/client-node talks to it through `kubeconfigPath`, exactly as to a cluster.
 *
 * What it serves (core `v1`, JSON):
 * - pods: create (201; 409 AlreadyExists; 422 Invalid with field causes; 404 for a missing
 *   namespace; 403 for a missing service account, an RBAC denial or a quota), get, list (label
 *   and field selectors, limit/continue), delete (grace from DeleteOptions or the query,
 *   preconditions), watch, and `pods/{name}/log`;
 * - events (list, get, watch; fieldSelector `involvedObject.name=…`), recorded by the fake
 *   scheduler and kubelet as real ones are (Scheduled, FailedScheduling, Pulling, Pulled, Failed,
 *   BackOff, Created, Started, Killing…);
 * - namespaces and nodes (get, list), and discovery (/version, /api, /api/v1, /apis) for kubectl.
 *
 * Watches (`?watch=1` or `/api/v1/watch/…`): newline-delimited `{"type","object"}` events after
 * `resourceVersion` ('' or '0': the current state as ADDED first), BOOKMARKs every
 * `bookmarkIntervalMs` when `allowWatchBookmarks=true`, `sendInitialEvents`, `timeoutSeconds`.
 * A watch from a compacted resourceVersion gets 200 and one ERROR event with a 410 Expired Status,
 * then the end of the stream (the watch cache's behaviour); `compact({ expireWatches: true })`
 * ends the open watches the same way (an etcd compaction); `closeWatches()` ends them without error.
 *
 * The fake kubelet ('processes', the default) binds pods to fake nodes by cpu/memory requests
 * and nodeSelector, then runs each container's `command` + `args` (or the image's entrypoint
 * given by `setImageRule`) as a local process group with `baseEnv`, HOSTNAME and the container's
 * env; `valueFrom` resolves secretKeyRef/configMapKeyRef from `setSecret`/`setConfigMap` (missing:
 * CreateContainerConfigError), fieldRef (name, namespace, uid, labels, annotations, nodeName,
 * serviceAccountName, hostIP, podIP) and resourceFieldRef. Images whose name contains
 * `nonexistent`, or a `setImageRule(…, { pullError })`, fail to pull (ErrImagePull, then
 * ImagePullBackOff); an image that is not a valid reference is InvalidImageName; requests beyond
 * every node are Unschedulable. Exit codes end containers as Completed/Error and pods as
 * Succeeded/Failed (restartPolicy Never), or restart with CrashLoopBackOff. In 'manual' mode no
 * scheduler or kubelet runs: the test drives pods with `setPodStatus`, `bindPod` and `addPodEvent`.
 *
 * Authentication is the kubeconfig's bearer token (none or unknown: 401); `grantToken` adds
 * tokens with RBAC-like rules. Latency (`setLatency`, per verb) and failures (`failNext`: any
 * status with its Status body and Retry-After, or a dropped connection, before or after the
 * request takes effect) are injectable. `close()` kills every process group it started and waits
 * for them, and closes every connection.
 */
export async function startFakeKubeApi(opts: FakeKubeApiOptions = {}): Promise<FakeKubeApi> {
  const api = new FakeKubeApi(opts);
  await api.listen();
  return api;
}

export { FakeKubeApi };
export type { AccessRule, FailureRule, FakeKubeApiOptions, RequestRecord, Verb } from './fake-kube-api.js';
export type { ImageRule } from './fake-kubelet.js';
export type { NodesOption } from './fake-scheduler.js';
export type { Quota } from './resource-quota.js';
export type { OpenWatch } from './watch-stream.js';
