// IPv4 subnets for the per-instance Docker networks. Each instance gets a small subnet (/29: the
// gateway, the container, room to spare) carved from a configured pool, so hundreds of networks
// fit where the engine's own default pools hold about thirty. Pure functions, unit-tested; the
// runtime feeds them the subnets the engine and the host's routes already use.
import { readFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';

/** The size of every instance subnet: 8 addresses (network, gateway, container, broadcast, 4 spare). */
export const INSTANCE_PREFIX_LENGTH = 29;

export interface Cidr {
  /** First address as an unsigned 32-bit number. */
  base: number;
  bits: number;
}

export function ipToNumber(ip: string): number {
  return ip.split('.').reduce((a, o) => a * 256 + Number(o), 0);
}

export function numberToIp(n: number): string {
  return [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
}

/** Parses "a.b.c.d/n" (the address is masked to the network); undefined for anything else. */
export function parseCidr(text: string): Cidr | undefined {
  const m = /^(\d{1,3}(?:\.\d{1,3}){3})\/(\d{1,2})$/.exec(text.trim());
  if (!m || !isIPv4(m[1]!)) return undefined;
  const bits = Number(m[2]);
  if (bits > 32) return undefined;
  const size = 2 ** (32 - bits);
  return { base: Math.floor(ipToNumber(m[1]!) / size) * size, bits };
}

export function formatCidr(c: Cidr): string {
  return `${numberToIp(c.base)}/${c.bits}`;
}

const size = (c: Cidr) => 2 ** (32 - c.bits);

export function overlaps(a: Cidr, b: Cidr): boolean {
  return a.base < b.base + size(b) && b.base < a.base + size(a);
}

/**
 * The first instance-sized subnet of `pool` that overlaps none of `taken`, searching from the
 * `start`-th block and wrapping around (agents on one machine start at random blocks so they
 * rarely race for the same one). Undefined when the pool is full.
 */
export function freeSubnet(pool: Cidr, taken: Cidr[], start = 0, bits = INSTANCE_PREFIX_LENGTH): Cidr | undefined {
  if (bits < pool.bits) return undefined;
  const blocks = 2 ** (bits - pool.bits);
  const step = 2 ** (32 - bits);
  for (let i = 0; i < blocks; i++) {
    const candidate = { base: pool.base + ((start + i) % blocks) * step, bits };
    if (!taken.some((t) => overlaps(candidate, t))) return candidate;
  }
  return undefined;
}

/** Gateway (first host address) and the one address the container gets, for a subnet. */
export function subnetAddresses(c: Cidr): { subnet: string; gateway: string } {
  return { subnet: formatCidr(c), gateway: numberToIp(c.base + 1) };
}

/**
 * IPv4 destinations the host routes somewhere other than its default route (its LANs, VPNs,
 * other bridges): an instance subnet must not shadow them. Linux only (/proc/net/route); empty elsewhere.
 */
export function hostRoutes(routeFile = '/proc/net/route'): Cidr[] {
  let text: string;
  try {
    text = readFileSync(routeFile, 'utf8');
  } catch {
    return [];
  }
  const out: Cidr[] = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    // Little-endian hex: destination and mask as the kernel stores them.
    const le = (hex: string) => {
      const n = Number.parseInt(hex, 16);
      return ((n & 0xff) << 24) + ((n >>> 8) & 0xff) * 65536 + ((n >>> 16) & 0xff) * 256 + ((n >>> 24) & 0xff);
    };
    const dest = le(f[1]!) >>> 0;
    const mask = le(f[7]!) >>> 0;
    if (mask === 0) continue; // the default route covers everything: not a conflict
    const bits = 32 - Math.log2(2 ** 32 - mask);
    if (!Number.isInteger(bits)) continue;
    out.push({ base: dest, bits });
  }
  return out;
}

/** Private and special IPv4 ranges a container must not reach by forwarding (RFC 1918, CGNAT, link-local, multicast). */
export const PRIVATE_RANGES = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '169.254.0.0/16', '224.0.0.0/4'];
