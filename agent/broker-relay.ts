// The tunnel relay: the only way rc-tunnel inside a container reaches the tunnel broker, and the
// only place a container's tunnel identity is presented. Tunnel tokens never enter containers
// (an app that serves /proc or its environment would hand them to any visitor, and a stolen
// token used to take over the victim's tunnel URL). Instead:
//
// - The docker runtime registers each instance's token and broker URLs here (they come in the
//   launch spec's env) and gives the container `RC_TUNNEL_BROKER=http://host.docker.internal:<port>`
//   (`/b<i>` appended for the i-th of several brokers) and `RC_TUNNEL_VIA_RELAY=1`, no token.
// - The relay listens on the default bridge's gateway address (what host.docker.internal resolves
//   to in every container, whatever network it is attached to) and speaks just enough HTTP to read
//   each connection's request head: only `GET /tunnel/connect` with an Upgrade goes through
//   (anything else: 404). The caller is identified by the connection's source address: the
//   running container of this agent that has that address on any of its networks (`identify`).
//   An address that is no such container is refused (403), as is an instance without a token.
// - The head is rewritten: Authorization, Proxy-Authorization, Host, Forwarded, x-forwarded-* and
//   x-rc-* headers the container sent are dropped; Host names the upstream broker and
//   `Authorization: Bearer <that instance's token>` is added. Then bytes are relayed both ways
//   (TLS to an https broker), so the WebSocket runs end to end between rc-tunnel and the broker.
//
// The source address is trustworthy because containers cannot choose it: they run without
// NET_ADMIN (no changing their address) and the engine's networks do not route one container's
// address from another. A container can therefore only ever present its own instance's identity.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { connect as tcpConnect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import type { Duplex } from 'node:stream';
import type { Logger } from '../lib/log.js';

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'));
}

/** The path rc-tunnel dials below its broker URL (gateway/tunnel/broker.ts CONNECT_PATH). */
const CONNECT_PATH = '/tunnel/connect';
/** `/tunnel/connect` (the first broker) or `/b<i>/tunnel/connect` (the i-th). */
const RELAY_PATH = /^(?:\/b([0-9]{1,2}))?\/tunnel\/connect$/;
/** Headers a container may not set towards the broker: credentials, routing and the platform's own. */
const DROPPED = /^(authorization|proxy-authorization|host|forwarded|x-forwarded-.*|x-real-ip|x-rc-.*)$/i;
/** Request heads must arrive within this time. */
const HEAD_TIMEOUT_MS = 10_000;
/**
 * Identifications (one engine call each) in flight at most: a container hammering the relay gets
 * 503s instead of queueing engine calls. rc-tunnel connects once per tunnel and retries with backoff.
 */
const MAX_IDENTIFYING = 16;

/** What the relay presents for one instance. */
interface Registration {
  token: string;
  brokers: URL[];
}

export interface TunnelRelayOptions {
  /** Address to listen on (the default bridge's gateway). */
  listenIp: string;
  /** The instance id of the running container with this address on any network; undefined when none. */
  identify(address: string): Promise<string | undefined>;
  logger: Logger;
  /** Extra TLS options towards https brokers (tests: a private CA). */
  tls?: ConnectionOptions;
  /**
   * Connections one instance may hold open through the relay (RC_TUNNEL_RELAY_PER_INSTANCE;
   * default RELAY_PER_INSTANCE). Each costs the agent two descriptors and the broker one: a
   * container looping over ports used to take thousands (issue 44); past it the relay answers 429.
   */
  perInstance?: number;
}

export const RELAY_PER_INSTANCE = 24;

/** Parses a broker setting (comma-separated URLs); undefined when one is no http(s)/ws(s) URL. */
export function parseBrokers(value: string): URL[] | undefined {
  const out: URL[] = [];
  for (const part of value.split(',')) {
    const s = part.trim();
    if (!s) continue;
    let url: URL;
    try {
      url = new URL(s);
    } catch {
      return undefined;
    }
    if (!['http:', 'https:', 'ws:', 'wss:'].includes(url.protocol)) return undefined;
    out.push(url);
  }
  return out.length && out.length <= 100 ? out : undefined;
}

function rawResponse(socket: Duplex, status: number, reason: string, detail: string, headers: Record<string, string> = {}): void {
  const body = JSON.stringify({ detail });
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`,
  );
}

/** The source address as containers have it (no IPv4-mapped IPv6 form). */
function plainAddress(address: string | undefined): string {
  return (address ?? '').replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '');
}

export class TunnelRelay {
  private readonly servers = new Map<number, Server>();
  private readonly instances = new Map<string, Registration>();
  private readonly sockets = new Set<Duplex>();
  /** The port new containers are given (the first one listened on). */
  private primary: number | undefined;
  private identifying = 0;
  /** Open relayed connections per instance. */
  private readonly open = new Map<string, number>();
  /** When a refusal was last logged, per instance. */
  private readonly limitLogged = new Map<string, number>();
  /** Open sockets per source address (relayed or still sending their head). */
  private readonly byAddress = new Map<string, number>();

  constructor(private readonly o: TunnelRelayOptions) {}

  /** Remembers the instance's token and brokers (a broker setting that does not parse registers nothing). */
  register(instanceId: string, token: string, brokerSetting: string): boolean {
    const brokers = parseBrokers(brokerSetting);
    if (!token || !brokers) return false;
    this.instances.set(instanceId, { token, brokers });
    return true;
  }

  unregister(instanceId: string): void {
    this.instances.delete(instanceId);
  }

  /** The broker setting a container is given for `count` brokers: one relay URL per broker. */
  containerBrokers(host: string, port: number, count: number): string {
    const base = `http://${host}:${port}`;
    if (count <= 1) return base;
    return Array.from({ length: count }, (_, i) => (i === 0 ? base : `${base}/b${i}`)).join(',');
  }

  /** Ports listened on (the firewall must let containers reach them). */
  ports(): number[] {
    return [...this.servers.keys()];
  }

  /**
   * The port for new containers: listens on the first of `preferred` that is free (a stable port
   * keeps working for containers across agent restarts), else on any, unless already listening.
   */
  async ensure(preferred: number[]): Promise<number> {
    if (this.primary !== undefined) return this.primary;
    for (const p of [...preferred, 0]) {
      const port = await this.listen(p).catch(() => undefined);
      if (port !== undefined) {
        this.primary ??= port;
        return this.primary;
      }
    }
    throw new Error('The tunnel relay could not listen');
  }

  /** Listens on `port` too (a container created by an earlier run of the agent was given it). */
  async adopt(port: number): Promise<void> {
    if (this.servers.has(port)) return;
    await this.listen(port).then(
      (p) => {
        this.primary ??= p;
      },
      (err: unknown) => this.o.logger.warn('tunnel relay: cannot listen on an adopted container port', { port, err }),
    );
  }

  private listen(port: number): Promise<number> {
    const server = createServer((req, res) => {
      // Plain requests: nothing but the tunnel's upgrade is relayed.
      req.resume();
      const body = JSON.stringify({ detail: 'The tunnel relay only relays GET /tunnel/connect (a WebSocket upgrade)' });
      res.writeHead(404, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' });
      res.end(body);
    });
    server.headersTimeout = HEAD_TIMEOUT_MS;
    server.requestTimeout = HEAD_TIMEOUT_MS;
    // Sockets per source address, before any head is read: a container that opens connections
    // and sends nothing would otherwise hold a descriptor each until the head timeout. Beyond
    // twice the per-instance limit, new ones are closed at once.
    server.on('connection', (socket: Socket) => {
      const address = plainAddress(socket.remoteAddress);
      const n = this.byAddress.get(address) ?? 0;
      if (n >= 2 * (this.o.perInstance ?? RELAY_PER_INSTANCE)) {
        socket.destroy();
        return;
      }
      this.byAddress.set(address, n + 1);
      socket.once('close', () => {
        const left = (this.byAddress.get(address) ?? 1) - 1;
        if (left > 0) this.byAddress.set(address, left);
        else this.byAddress.delete(address);
      });
    });
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => void this.upgrade(req, socket, head));
    server.on('clientError', (_err, socket) => {
      if (socket.writable) rawResponse(socket, 400, 'Bad Request', 'Malformed request');
      else socket.destroy();
    });
    return new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, this.o.listenIp, () => {
        server.off('error', reject);
        server.on('error', (err) => this.o.logger.warn('tunnel relay error', { err }));
        const a = server.address();
        const bound = typeof a === 'object' && a ? a.port : port;
        this.servers.set(bound, server);
        resolve(bound);
      });
    });
  }

  private track(s: Duplex): void {
    this.sockets.add(s);
    s.once('close', () => this.sockets.delete(s));
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    this.track(socket);
    socket.on('error', () => socket.destroy());
    const url = new URL(req.url ?? '/', 'http://relay');
    const match = RELAY_PATH.exec(url.pathname);
    if (req.method !== 'GET' || !match) {
      rawResponse(socket, 404, 'Not Found', 'The tunnel relay only relays GET /tunnel/connect (a WebSocket upgrade)');
      return;
    }
    const address = plainAddress((socket as Socket).remoteAddress);
    if (this.identifying >= MAX_IDENTIFYING) {
      rawResponse(socket, 503, 'Service Unavailable', 'The tunnel relay is busy; retry');
      return;
    }
    let instanceId: string | undefined;
    this.identifying++;
    try {
      instanceId = await this.o.identify(address);
    } catch (err) {
      this.o.logger.warn('tunnel relay: identifying a connection failed', { address, err });
      rawResponse(socket, 503, 'Service Unavailable', 'The tunnel relay cannot identify containers right now; retry');
      return;
    } finally {
      this.identifying--;
    }
    if (socket.destroyed) return;
    if (!instanceId) {
      rawResponse(socket, 403, 'Forbidden', `The tunnel relay serves running instances only; ${address || 'this address'} is none`);
      return;
    }
    const reg = this.instances.get(instanceId);
    if (!reg) {
      rawResponse(
        socket,
        403,
        'Forbidden',
        'This instance has no tunnel identity. This notebook was created before the tunnel feature was enabled: destroy this notebook and create a new one.',
      );
      return;
    }
    if (!this.holdSlot(instanceId, socket)) return;
    const broker = reg.brokers[Number(match[1] ?? 0)];
    if (!broker) {
      rawResponse(socket, 404, 'Not Found', `No broker number ${match[1]} for this instance`);
      return;
    }
    const secure = broker.protocol === 'https:' || broker.protocol === 'wss:';
    const host = broker.hostname.replace(/^\[|\]$/g, '');
    const port = Number(broker.port || (secure ? 443 : 80));
    const path = `${broker.pathname.replace(/\/+$/, '')}${CONNECT_PATH}${url.search}`;
    const lines = [`GET ${path} HTTP/1.1`, `host: ${broker.host}`, `authorization: Bearer ${reg.token}`];
    const raw = req.rawHeaders;
    for (let i = 0; i + 1 < raw.length; i += 2) if (!DROPPED.test(raw[i]!)) lines.push(`${raw[i]}: ${raw[i + 1]}`);
    const upstream = secure ? tlsConnect({ ...this.o.tls, host, port, servername: isIP(host) ? undefined : host }) : tcpConnect({ host, port });
    this.track(upstream);
    let connected = false;
    upstream.once(secure ? 'secureConnect' : 'connect', () => {
      connected = true;
      upstream.write(lines.join('\r\n') + '\r\n\r\n');
      if (head.length) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.on('error', (err) => {
      if (!connected && !socket.destroyed) {
        this.o.logger.warn('tunnel relay: the broker is unreachable', { broker: broker.origin, err });
        rawResponse(socket, 502, 'Bad Gateway', `The tunnel relay cannot reach the broker: ${err.message}`);
      } else {
        socket.destroy();
      }
      upstream.destroy();
    });
    upstream.once('close', () => socket.destroy());
    socket.once('close', () => upstream.destroy());
  }

  /**
   * Counts the connection against its instance until it closes; false (after answering 429) when
   * the instance holds RC_TUNNEL_RELAY_PER_INSTANCE already.
   */
  private holdSlot(instanceId: string, socket: Duplex): boolean {
    const limit = this.o.perInstance ?? RELAY_PER_INSTANCE;
    const held = this.open.get(instanceId) ?? 0;
    if (held >= limit) {
      const detail = `Too many tunnel connections from this instance: ${limit} are open through the relay (RC_TUNNEL_RELAY_PER_INSTANCE)`;
      const now = Date.now();
      if ((this.limitLogged.get(instanceId) ?? 0) <= now - 60_000) {
        // Once a minute per instance: a refused loop must not flood the agent's log.
        if (this.limitLogged.size >= 10_000) this.limitLogged.clear();
        this.limitLogged.set(instanceId, now);
        this.o.logger.warn('tunnel relay: limit reached (logged once a minute per instance)', { instanceId, limit });
      }
      rawResponse(socket, 429, 'Too Many Requests', detail, { 'retry-after': '30' });
      return false;
    }
    this.open.set(instanceId, held + 1);
    socket.once('close', () => {
      const n = (this.open.get(instanceId) ?? 1) - 1;
      if (n > 0) this.open.set(instanceId, n);
      else this.open.delete(instanceId);
    });
    return true;
  }

  close(): void {
    for (const server of this.servers.values()) server.close();
    for (const s of this.sockets) s.destroy();
    this.servers.clear();
    this.primary = undefined;
  }
}
