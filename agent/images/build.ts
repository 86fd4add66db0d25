// `docker build` through the Engine API: the context directory is sent as a tar stream (the
// system's tar), the build output is followed and an error line fails the build.
import { spawn } from 'node:child_process';
import { Client } from 'undici';
import { streamLines } from '../docker-api.js';
/** Label on every image the project builds (value: its tag), so they are easy to find and remove. */
export const LABEL_IMAGE = 'rc.local-image';

export interface BuildOptions {
  socketPath: string;
  tag: string;
  contextDir: string;
  /** More image labels (besides LABEL_IMAGE). */
  labels?: Record<string, string>;
  onOutput?: (line: string) => void;
}

/**
 * The pending message for a line of docker build's output: the classic builder (the Engine API's
 * /build) starts each Dockerfile instruction with `Step k/n : ...`, which becomes
 * `building image: step k/n`; undefined for every other line (layer ids, the instruction's own
 * output), which leaves the message as it was.
 */
export function buildStepMessage(line: string): string | undefined {
  const step = /^Step (\d+)\/(\d+) :/.exec(line);
  return step ? `building image: step ${step[1]}/${step[2]}` : undefined;
}

export async function buildImage(o: BuildOptions): Promise<void> {
  const client = new Client('http://localhost', { socketPath: o.socketPath });
  const tar = spawn('tar', ['-C', o.contextDir, '-c', '.'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let tarErr = '';
  tar.stderr!.on('data', (d: Buffer) => {
    tarErr += d.toString();
  });
  try {
    const params = new URLSearchParams({ t: o.tag, rm: 'true', forcerm: 'true', labels: JSON.stringify({ ...o.labels, [LABEL_IMAGE]: o.tag }) });
    // Unversioned path: every engine since 1.24 accepts /build the same way.
    const res = await client.request({
      method: 'POST',
      path: `/build?${params}`,
      body: tar.stdout!,
      headers: { 'content-type': 'application/x-tar' },
      headersTimeout: 600_000,
      bodyTimeout: 600_000,
    });
    let error: string | undefined;
    let last = '';
    for await (const line of streamLines(res.body)) {
      last = line;
      try {
        const j = JSON.parse(line) as { stream?: string; error?: string; message?: string };
        if (j.error) error = j.error;
        else if (j.message && res.statusCode >= 400) error = j.message;
        else if (j.stream?.trim()) o.onOutput?.(j.stream.trim());
      } catch {
        if (res.statusCode >= 400) error = line;
      }
    }
    if (res.statusCode >= 400 && !error) error = `status ${res.statusCode} ${last}`;
    if (error) throw new Error(`Building ${o.tag} failed: ${error}${tarErr ? ` (tar: ${tarErr.trim()})` : ''}`);
  } finally {
    tar.kill();
    await client.close();
  }
}
