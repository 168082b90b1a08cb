/** A signal to the process group the container's process leads (spawned detached); nothing when the group is gone. */
export function signalGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is gone
  }
}

/** The number of a signal that ended a process, for the exit code a runtime reports (128 + n). */
export function signalNumber(signal: NodeJS.Signals | null): number {
  if (!signal) return 0;
  return (
    (
      {
        SIGHUP: 1,
        SIGINT: 2,
        SIGQUIT: 3,
        SIGABRT: 6,
        SIGKILL: 9,
        SIGSEGV: 11,
        SIGPIPE: 13,
        SIGALRM: 14,
        SIGTERM: 15,
      } as Record<string, number>
    )[signal] ?? 0
  );
}
