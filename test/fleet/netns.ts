// Network namespaces as GPU hosts for the fleet tests: each host is a namespace joined to the
// machine by a veth pair in its own /30 of a private /24 (10.213.<random>.0/24) the lab picked
// unused. Everything the lab made (links, namespaces, the processes left inside them) is removed
// by cleanup(), which runs after the test and on process exit, also when the test fails.
import { execFileSync } from 'node:child_process';
import type { TestContext } from 'node:test';

export interface NetnsHost {
  /** Namespace name. */
  ns: string;
  /** The host's address inside its namespace (agents bind it). */
  address: string;
  /** The machine's side of the link (cut and restored by the tests). */
  rootIf: string;
  /** Command prefix that runs a program inside the namespace. */
  exec: string[];
}

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();

/**
 * Whether namespaces can be made here. Root and iproute2 are needed: without them the test is
 * skipped with the reason, unless RC_REQUIRE_NETNS=1 (CI), which makes it fail instead.
 */
export function netnsAvailable(t: TestContext): boolean {
  let why: string | undefined;
  if (process.getuid?.() !== 0) why = 'network namespaces need root';
  else {
    try {
      ip('netns', 'list');
    } catch (err) {
      why = `ip netns does not work here: ${(err as Error).message}`;
    }
  }
  if (!why) return true;
  if (process.env.RC_REQUIRE_NETNS === '1') throw new Error(`RC_REQUIRE_NETNS=1 but ${why}`);
  t.skip(why);
  return false;
}

export class NetnsLab {
  readonly prefix = `rcf-${process.pid}-`;
  /** Interface names are at most 15 characters. */
  private readonly ifPrefix = `rcf${process.pid % 1_000_000}`;
  readonly subnet: string;
  private readonly hosts: NetnsHost[] = [];
  private readonly onExit = () => this.cleanup();

  constructor(t: TestContext) {
    this.subnet = unusedSubnet();
    process.on('exit', this.onExit);
    t.after(() => this.cleanup());
  }

  /** A new host: namespace, veth pair, addresses 10.213.x.(4i+1) (machine) and (4i+2) (host). */
  addHost(name: string): NetnsHost {
    const i = this.hosts.length;
    const ns = `${this.prefix}${name}`;
    const rootIf = `${this.ifPrefix}${String.fromCharCode(97 + i)}r`;
    const peerIf = `${this.ifPrefix}${String.fromCharCode(97 + i)}p`;
    const host: NetnsHost = { ns, address: `${this.subnet}.${4 * i + 2}`, rootIf, exec: ['ip', 'netns', 'exec', ns] };
    this.hosts.push(host);
    ip('netns', 'add', ns);
    ip('link', 'add', rootIf, 'type', 'veth', 'peer', 'name', peerIf);
    ip('link', 'set', peerIf, 'netns', ns);
    ip('addr', 'add', `${this.subnet}.${4 * i + 1}/30`, 'dev', rootIf);
    ip('link', 'set', rootIf, 'up');
    ip('-n', ns, 'addr', 'add', `${host.address}/30`, 'dev', peerIf);
    ip('-n', ns, 'link', 'set', peerIf, 'up');
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    return host;
  }

  /** Cuts the host's link (the machine's side goes down: no packet passes, no reset is sent). */
  cut(host: NetnsHost): void {
    ip('link', 'set', host.rootIf, 'down');
  }

  restore(host: NetnsHost): void {
    ip('link', 'set', host.rootIf, 'up');
  }

  /** Kills what still runs in the namespaces, deletes the links and the namespaces. Idempotent. */
  cleanup(): void {
    for (const h of this.hosts.splice(0)) {
      try {
        for (const pid of ip('netns', 'pids', h.ns).split('\n').filter(Boolean)) {
          try {
            process.kill(Number(pid), 'SIGKILL');
          } catch {
            /* gone */
          }
        }
      } catch {
        /* namespace gone */
      }
      try {
        ip('link', 'del', h.rootIf);
      } catch {
        /* gone with the namespace */
      }
      try {
        ip('netns', 'del', h.ns);
      } catch {
        /* already deleted */
      }
    }
    process.off('exit', this.onExit);
  }
}

/** 10.213.x with no address or route of this machine in it yet. */
function unusedSubnet(): string {
  const used = ip('-4', 'addr') + ip('-4', 'route');
  for (let tries = 0; tries < 50; tries++) {
    const net = `10.213.${1 + Math.floor(Math.random() * 254)}`;
    if (!used.includes(`${net}.`)) return net;
  }
  throw new Error('no free 10.213.x.0/24 subnet');
}
