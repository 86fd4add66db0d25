// The backend client's question to a backend that has gone quiet: "are you alive?". The pool
// (lib/relay/http-pool.ts) asks it when a request has waited past its silence limit and nothing
// at all has come from the backend for as long (a backend busy answering others is alive without
// asking). A GET of a health path on a connection of its own (a pooled one may be queued behind
// the very requests that wait): any answer below 500 is life (vLLM's and SGLang's /health answer
// 200 and vLLM's 5xx once its engine is dead; llama.cpp's 200, 503 while it loads a model; a
// server without the path answers 404, which is life too). No timer of its own: the pool's sweep
// gives up on it after its limit (cancel()).
import * as net from 'node:net';
import * as tls from 'node:tls';

export type ProbeState = 'running' | 'alive' | 'dead';

export interface ProbeTarget {
  host: string;
  port: number;
  secure: boolean;
  /** The Host header value. */
  hostHeader: string;
  tls?: tls.ConnectionOptions;
}

/** The status line's start: `HTTP/1.x NNN`. */
const STATUS_LINE = /^HTTP\/1\.[01] (\d{3})/;

export class LivenessProbe {
  state: ProbeState = 'running';
  /** Why the backend was found dead (for the failed requests' message). */
  detail = '';
  private readonly socket: net.Socket;
  private head = '';

  constructor(
    target: ProbeTarget,
    readonly path: string,
    /** performance.now() when it was sent. */
    readonly startedAt: number,
    /** Called once, when the state leaves 'running' (not after cancel()). */
    private readonly onDone: (probe: LivenessProbe) => void,
  ) {
    const socket = target.secure
      ? tls.connect({
          servername: net.isIP(target.host) ? undefined : target.host,
          ALPNProtocols: ['http/1.1'],
          ...target.tls,
          host: target.host,
          port: target.port,
        })
      : net.connect({ host: target.host, port: target.port });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setEncoding('latin1');
    socket.write(`GET ${path} HTTP/1.1\r\nhost: ${target.hostHeader}\r\naccept: */*\r\nconnection: close\r\n\r\n`);
    socket.on('data', (text: string) => this.onText(text));
    socket.on('error', (err: Error) => this.settle('dead', `GET ${path}: ${err.message}`));
    socket.on('close', () => this.settle('dead', `GET ${path}: the connection closed without an answer`));
  }

  /** Gives up (the pool's limit passed): dead, without calling back. */
  cancel(detail: string): void {
    if (this.state !== 'running') return;
    this.state = 'dead';
    this.detail = detail;
    this.socket.destroy();
  }

  private onText(text: string): void {
    this.head += text;
    const eol = this.head.indexOf('\n');
    if (eol < 0 && this.head.length < 64) return;
    const m = STATUS_LINE.exec(this.head);
    if (!m) this.settle('dead', `GET ${this.path}: not an HTTP response`);
    else if (Number(m[1]) >= 500) this.settle('dead', `GET ${this.path} answered ${m[1]}`);
    else this.settle('alive', '');
  }

  private settle(state: 'alive' | 'dead', detail: string): void {
    if (this.state !== 'running') return;
    this.state = state;
    this.detail = detail;
    this.socket.destroy();
    this.onDone(this);
  }
}
