/** Every pod name POSTed and created, by `namespace/name`, for tests that count creates or find a hashed name. */
export class PostedPods {
  private readonly posts = new Map<string, number>();
  private readonly creates = new Map<string, number>();
  /** The labels of every pod name POSTed, in order. */
  private readonly labels = new Map<string, Record<string, string>>();

  post(namespace: string, name: string, labels: unknown): void {
    const key = `${namespace}/${name}`;
    this.posts.set(key, (this.posts.get(key) ?? 0) + 1);
    if (labels && typeof labels === 'object') this.labels.set(key, { ...(labels as Record<string, string>) });
  }

  created(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    this.creates.set(key, (this.creates.get(key) ?? 0) + 1);
  }

  /** Successful creates of this pod name (a create answered 409 is not one). */
  createCount(namespace: string, name: string): number {
    return this.creates.get(`${namespace}/${name}`) ?? 0;
  }

  /** Every POST naming this pod, whatever its answer. */
  createAttempts(namespace: string, name: string): number {
    return this.posts.get(`${namespace}/${name}`) ?? 0;
  }

  /** The name of the first pod POSTed (to this namespace, or to any) with all of these labels. */
  nameByLabels(labels: Record<string, string>, namespace?: string): string | undefined {
    for (const [key, have] of this.labels) {
      const [ns, name] = [key.slice(0, key.indexOf('/')), key.slice(key.indexOf('/') + 1)];
      if ((namespace === undefined || ns === namespace) && Object.entries(labels).every(([k, v]) => have[k] === v))
        return name;
    }
    return undefined;
  }
}
