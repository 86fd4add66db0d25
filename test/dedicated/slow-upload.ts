// A client that sends a request head and all but the last bytes of its body over a raw socket, and
// keeps what comes back: the limit tests' slow upload (a body still arriving holds its place).
import { connect, type Socket } from 'node:net';

export interface SlowUpload {
  socket: Socket;
  /** What the server answered so far (latin1). */
  reply: string;
  closed: boolean;
  /** The bytes held back: write them to finish the body. */
  rest: Buffer;
}

/** Connects to `host:port`, sends `head` (ending in the blank line) and `body` but its last `withhold` bytes. */
export function slowUpload(host: string, port: number, head: string, body: Buffer, withhold: number): SlowUpload {
  const socket = connect({ host, port });
  const u: SlowUpload = { socket, reply: '', closed: false, rest: body.subarray(body.length - withhold) };
  socket.on('connect', () => {
    socket.write(head);
    socket.write(body.subarray(0, body.length - withhold));
  });
  socket.on('data', (d: Buffer) => (u.reply += d.toString('latin1')));
  socket.on('close', () => (u.closed = true));
  socket.on('error', () => {});
  return u;
}

/** The whole answer is in (head and a body of its content-length). */
export const answered = (u: SlowUpload): boolean => {
  const end = u.reply.indexOf('\r\n\r\n');
  const len = /content-length: (\d+)/i.exec(u.reply);
  return end >= 0 && len !== null && u.reply.length >= end + 4 + Number(len[1]);
};
export const statusOf = (u: SlowUpload): number => Number(/^HTTP\/1\.1 (\d{3})/.exec(u.reply)?.[1] ?? 0);
export const detailOf = (u: SlowUpload): string => (JSON.parse(u.reply.slice(u.reply.indexOf('\r\n\r\n') + 4)) as { detail: string }).detail;
