// The agent's own firewall rules for the per-instance bridges (issue #27): whatever the engine
// does with iptables, a container reaches neither the host (except the tunnel broker relay and
// the host's DNS servers) nor, when the host forwards, another bridge or a private address (other
// instances, other fleet hosts, cloud metadata). The rules match the bridges by their interface
// prefix (`<prefix>-+`), so they hold for every instance of every agent of that prefix.
//
// Chains (filter table, IPv4: containers get no IPv6, the engine disables it in them):
//   <prefix>-isolate-in    jumped to from INPUT for traffic from the bridges to the host itself
//   <prefix>-isolate-fwd   jumped to from FORWARD, and from DOCKER-USER when the engine manages
//                          iptables (its own FORWARD rules are inserted above ours, DOCKER-USER
//                          stays first)
//   <prefix>-isolate-relay the relay ports (one rule per agent and port, with the agent's id in a
//                          comment), jumped to from the -in chain
// The -in and -fwd chains are rewritten in one iptables-restore transaction (never a moment
// without them), identical for every agent of the same settings: several agents on one machine
// install the same content, and a restart installs it again. Jumps are checked, added and
// de-duplicated, before every instance start; every 30 s the runtime installs it all again
// (refresh: a firewall reload may have flushed it). Rules stay when the agent exits (its containers keep running); they match
// nothing once no bridge of the prefix exists.
import { descriptorReserve } from './fd-reserve.js';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { promisify } from 'node:util';
import { ipToNumber, overlaps, parseCidr, PRIVATE_RANGES } from './subnets.js';

const run = promisify(execFile);

export interface FirewallConfig {
  /** Prefix of the bridges and the chains (`rc`: bridges rc-…, chains rc-isolate-…). */
  prefix: string;
  /** The pool instance subnets come from (blocked between bridges even when it is not private). */
  pool: string;
  /** More destinations to block (CIDRs), e.g. fleet hosts on public addresses. */
  blocked: string[];
  /** Private DNS servers the host uses (the engine's embedded DNS forwards to them from the container). */
  nameservers: string[];
}

export interface FirewallChains {
  input: string;
  forward: string;
  relay: string;
}

export function chainNames(prefix: string): FirewallChains {
  return { input: `${prefix}-isolate-in`, forward: `${prefix}-isolate-fwd`, relay: `${prefix}-isolate-relay` };
}

/** The interface match of every instance bridge of the prefix. */
export const bridgeMatch = (prefix: string) => `${prefix}-+`;

/** Private IPv4 name servers of resolv.conf (public ones need no exception). */
export function privateNameservers(resolvConf = '/etc/resolv.conf'): string[] {
  let text = '';
  try {
    text = readFileSync(resolvConf, 'utf8');
  } catch {
    return [];
  }
  const ranges = PRIVATE_RANGES.map((r) => parseCidr(r)!);
  const out: string[] = [];
  for (const m of text.matchAll(/^\s*nameserver\s+(\S+)/gm)) {
    const ip = m[1]!;
    if (isIPv4(ip) && !ip.startsWith('127.') && ranges.some((r) => overlaps(r, { base: ipToNumber(ip), bits: 32 }))) out.push(ip);
  }
  return [...new Set(out)];
}

/** The iptables-restore input that (re)writes the -in and -fwd chains. Pure. */
export function isolationRuleset(c: FirewallConfig): string {
  const { input, forward, relay } = chainNames(c.prefix);
  const dns = (chain: string, target: string) =>
    c.nameservers.flatMap((ns) => ['udp', 'tcp'].map((p) => `-A ${chain} -d ${ns}/32 -p ${p} -m ${p} --dport 53 -j ${target}`));
  const blocked = [...new Set([...PRIVATE_RANGES, c.pool, ...c.blocked])];
  const reject = '-j REJECT --reject-with icmp-port-unreachable';
  return [
    '*filter',
    `:${input} - [0:0]`,
    `:${forward} - [0:0]`,
    // To the host itself: answers to what the host opened (readiness probes, published ports),
    // the relay ports, DNS; nothing else (the gateway addresses, the host's LAN and public
    // addresses, the advertise address and every port published there).
    `-A ${input} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
    `-A ${input} -j ${relay}`,
    ...dns(input, 'ACCEPT'),
    `-A ${input} ${reject}`,
    // Forwarded: answers pass; DNS to the host's private servers passes; other bridges (this
    // prefix's and the engine's default one) and private ranges are refused; the rest (the public
    // internet, when the host forwards and masquerades) continues through the host's rules.
    `-A ${forward} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN`,
    ...dns(forward, 'RETURN'),
    `-A ${forward} -o ${bridgeMatch(c.prefix)} ${reject}`,
    `-A ${forward} -o docker0 ${reject}`,
    ...blocked.map((cidr) => `-A ${forward} -d ${cidr} ${reject}`),
    'COMMIT',
    '',
  ].join('\n');
}

/** A jump rule (iptables arguments after the chain name) from a built-in chain to ours. */
export function jumpRule(prefix: string, target: string): string[] {
  return ['-i', bridgeMatch(prefix), '-j', target];
}

/** The relay rule of one agent: the relay's address and port, from every instance bridge. */
export function relayRule(listenIp: string, port: number, agentId: string): string[] {
  return ['-d', `${listenIp}/32`, '-p', 'tcp', '-m', 'tcp', '--dport', String(port), '-m', 'comment', '--comment', `rc relay ${agentId}`, '-j', 'ACCEPT'];
}

export class FirewallError extends Error {}

/** Runs iptables (waiting for the xtables lock); rejects with its stderr. */
async function iptables(args: string[]): Promise<string> {
  try {
    // The child's pipes come from the descriptors held back (fd-reserve.ts): the refresh must run at the limit too.
    return (await descriptorReserve.around(() => run('iptables', ['-w', '5', ...args], { timeout: 30_000 }))).stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new FirewallError(`iptables ${args.join(' ')}: ${(e.stderr || e.message).trim()}`);
  }
}

async function iptablesRestore(input: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const child = descriptorReserve.around(() =>
      execFile('iptables-restore', ['-w', '5', '--noflush'], { timeout: 30_000 }, (err, _out, stderr) => {
        if (err) reject(new FirewallError(`iptables-restore: ${(stderr || err.message).trim()}`));
        else resolve();
      }),
    );
    child.stdin?.end(input);
  });
}

async function chainExists(chain: string): Promise<boolean> {
  return iptables(['-S', chain]).then(
    () => true,
    () => false,
  );
}

/** Makes `rule` appear exactly once in `chain` (inserted first when missing): concurrent installs converge. */
async function ensureOnce(chain: string, rule: string[]): Promise<void> {
  const line = `-A ${chain} ${rule.map((a) => (/[\s"]/.test(a) ? JSON.stringify(a) : a)).join(' ')}`;
  const count = (await iptables(['-S', chain])).split('\n').filter((l) => l.trim() === line).length;
  if (count === 0) await iptables(['-I', chain, '1', ...rule]);
  for (let i = 1; i < count; i++) await iptables(['-D', chain, ...rule]).catch(() => undefined);
}

/**
 * Installs the isolation rules and keeps them installed (`ensureJumps` before every instance
 * starts: the engine may have created DOCKER-USER since). `allowRelay` opens one relay port.
 */
export class IsolationFirewall {
  private readonly chains: FirewallChains;
  private readonly relays = new Set<string>();
  private closed = false;

  constructor(
    private readonly config: FirewallConfig,
    private readonly agentId: string,
  ) {
    this.chains = chainNames(config.prefix);
  }

  async install(): Promise<void> {
    if (!(await chainExists(this.chains.relay)))
      await iptables(['-N', this.chains.relay]).catch((err: unknown) => {
        if (!/exists/i.test((err as Error).message)) throw err; // another agent made it meanwhile
      });
    await iptablesRestore(isolationRuleset(this.config));
    await this.ensureJumps();
  }

  async ensureJumps(): Promise<void> {
    await ensureOnce('INPUT', jumpRule(this.config.prefix, this.chains.input));
    await ensureOnce('FORWARD', jumpRule(this.config.prefix, this.chains.forward));
    if (await chainExists('DOCKER-USER')) await ensureOnce('DOCKER-USER', jumpRule(this.config.prefix, this.chains.forward));
  }

  /**
   * Installs everything again, this agent's relay rules included: a firewall reload (ufw,
   * firewalld, iptables-restore of a saved set) or an engine restart may have removed them.
   */
  async refresh(): Promise<void> {
    if (this.closed) return;
    await this.install();
    for (const key of this.closed ? [] : this.relays) {
      const [ip, port] = key.split(':');
      await ensureOnce(this.chains.relay, relayRule(ip!, Number(port), this.agentId));
    }
  }

  /** Lets every instance bridge reach the relay at listenIp:port (idempotent). */
  async allowRelay(listenIp: string, port: number): Promise<void> {
    const key = `${listenIp}:${port}`;
    if (this.relays.has(key)) return;
    await ensureOnce(this.chains.relay, relayRule(listenIp, port, this.agentId));
    this.relays.add(key);
  }

  /** Removes this agent's relay rules (its relays close with it); the shared chains stay. */
  async close(): Promise<void> {
    this.closed = true;
    for (const key of this.relays) {
      const [ip, port] = key.split(':');
      await iptables(['-D', this.chains.relay, ...relayRule(ip!, Number(port), this.agentId)]).catch(() => undefined);
    }
    this.relays.clear();
  }
}

/** Removes the jumps and chains of a prefix (tests, or an operator retiring the docker runtime). */
export async function removeIsolationFirewall(prefix: string): Promise<void> {
  const chains = chainNames(prefix);
  for (const [from, to] of [
    ['INPUT', chains.input],
    ['FORWARD', chains.forward],
    ['DOCKER-USER', chains.forward],
  ] as const) {
    for (let i = 0; i < 10; i++)
      if (
        !(await iptables(['-D', from, ...jumpRule(prefix, to)]).then(
          () => true,
          () => false,
        ))
      )
        break;
  }
  for (const c of [chains.input, chains.forward, chains.relay]) await iptables(['-F', c]).catch(() => undefined);
  for (const c of [chains.input, chains.forward, chains.relay]) await iptables(['-X', c]).catch(() => undefined);
}
