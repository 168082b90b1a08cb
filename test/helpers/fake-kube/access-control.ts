import type { Route, Verb } from './api-route.js';
import { forbidden } from './status.js';

/** A rule for a token other than the main one: what it may do, RBAC-style. */
export interface AccessRule {
  verbs: Array<Verb | '*'>;
  /** `pods`, `pods/log`, `events`, `namespaces`, `nodes`, or '*'. */
  resources: string[];
  /** Namespaces the rule applies in (a Role); absent for every namespace (a ClusterRole). */
  namespaces?: string[];
}

/** Who a bearer token names, and what it may do ('all' for the kubeconfig's own token). */
export interface Identity {
  user: string;
  rules: AccessRule[] | 'all';
}

/** RBAC's answer, worded as the authorizer words a denial. */
export function authorize(who: Identity, route: Route): void {
  if (route.discovery !== undefined || who.rules === 'all') return;
  const resource = route.subresource ? `${route.resource}/${route.subresource}` : route.resource!;
  const verb = route.verb === 'watch' && route.name !== undefined ? 'watch' : route.verb;
  const ok = who.rules.some(
    (r) =>
      (r.verbs.includes('*') || r.verbs.includes(verb as Verb)) &&
      (r.resources.includes('*') || r.resources.includes(resource)) &&
      (r.namespaces === undefined || (route.namespace !== undefined && r.namespaces.includes(route.namespace))),
  );
  if (ok) return;
  const scope = route.namespace !== undefined ? `in the namespace "${route.namespace}"` : 'at the cluster scope';
  throw forbidden(
    route.resource!,
    route.name,
    `User "${who.user}" cannot ${verb} resource "${resource}" in API group "" ${scope}`,
  );
}
