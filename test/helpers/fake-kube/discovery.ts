/**
 * The discovery documents kubectl reads before anything else (/version, /api, /apis, /api/v1):
 * the fake's one group version, v1, with the resources it serves and their verbs.
 */
export function discoveryDocument(path: string, serverAddress: string): unknown {
  const p = path.replace(/^\/+|\/+$/g, '');
  if (p === 'version')
    return {
      major: '1',
      minor: '31',
      gitVersion: 'v1.31.0-fake',
      gitCommit: 'fake',
      gitTreeState: 'clean',
      buildDate: '2026-01-01T00:00:00Z',
      goVersion: 'go1.22',
      compiler: 'gc',
      platform: 'linux/amd64',
    };
  if (p === 'api')
    return {
      kind: 'APIVersions',
      versions: ['v1'],
      serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress }],
    };
  if (p === 'apis') return { kind: 'APIGroupList', apiVersion: 'v1', groups: [] };
  if (p === 'api/v1') {
    const res = (name: string, kind: string, namespaced: boolean, verbs: string[]) => ({
      name,
      singularName: name === kind.toLowerCase() + 's' ? kind.toLowerCase() : '',
      namespaced,
      kind,
      verbs,
    });
    return {
      kind: 'APIResourceList',
      groupVersion: 'v1',
      resources: [
        {
          ...res('pods', 'Pod', true, [
            'create',
            'delete',
            'deletecollection',
            'get',
            'list',
            'patch',
            'update',
            'watch',
          ]),
          shortNames: ['po'],
        },
        { ...res('pods/log', 'Pod', true, ['get']), singularName: '' },
        { ...res('events', 'Event', true, ['get', 'list', 'watch']), shortNames: ['ev'] },
        { ...res('namespaces', 'Namespace', false, ['get', 'list']), shortNames: ['ns'] },
        { ...res('nodes', 'Node', false, ['get', 'list']), shortNames: ['no'] },
      ],
    };
  }
  return 'ok';
}
