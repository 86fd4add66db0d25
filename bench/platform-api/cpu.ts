// CPU time of processes read from /proc (Linux): the platform's own process, and the PostgreSQL
// backends serving one database (their process titles name it: `postgres: [cluster: ]user db
// 127.0.0.1(port) idle`, Debian's clusters adding `15/main:`), so a store's cost counts what the
// database server spends for it too.
import { readdirSync, readFileSync } from 'node:fs';

/** Clock ticks per second of /proc's utime and stime (USER_HZ: 100 on every Linux we run on). */
const TICKS_PER_S = 100;

/** utime + stime of `pid` in microseconds; 0 once it is gone. */
export function processCpuMicros(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (in parentheses, which may hold spaces): utime is the 12th, stime the 13th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / TICKS_PER_S;
  } catch {
    return 0;
  }
}

/** The pids of PostgreSQL backends connected to `database`. */
function backendsOf(database: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (cmdline.startsWith('postgres: ') && cmdline.replace(/\0/g, ' ').split(' ').includes(database)) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/**
 * The CPU the backends of `database` used since the last call (a backend that appeared since counts
 * whole; one that ended meanwhile loses its last stretch: the pool keeps its connections open).
 */
export class BackendCpu {
  private readonly seen = new Map<number, number>();

  constructor(private readonly database: string) {
    this.takeMicros();
  }

  takeMicros(): number {
    let used = 0;
    for (const pid of backendsOf(this.database)) {
      const now = processCpuMicros(pid);
      used += now - (this.seen.get(pid) ?? 0);
      this.seen.set(pid, now);
    }
    return used;
  }
}
