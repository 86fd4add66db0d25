// Validation of a launch spec as it arrives from the control plane, and its idempotency hash.
import { createHash } from 'node:crypto';
import { isAbsolute, normalize } from 'node:path';
import { z } from 'zod';
import { AgentInvalidArgumentError } from './errors.js';
import type { LaunchSpec } from './types.js';

/** Instance ids end up in paths and container names. */
export const INSTANCE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,255}$/;
const VOLUME_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const MAX_FILES_BYTES = 1024 * 1024;

/** A relative path that stays inside its root (no absolute path, no `..`). */
function isSafeRelativePath(p: string): boolean {
  if (!p || p.length > 1024 || isAbsolute(p) || p.includes('\0')) return false;
  const n = normalize(p);
  return n !== '..' && !n.startsWith('../') && n !== '.';
}

const launchSpecSchema = z.object({
  instanceId: z.string().regex(INSTANCE_ID_PATTERN, 'instance_id must be 1-128 characters of [A-Za-z0-9_.-], starting alphanumeric'),
  image: z.string().max(1024),
  instanceType: z.string().max(64),
  startCommand: z.string().max(64 * 1024),
  env: z
    .record(z.string().regex(ENV_NAME, 'env names must match [A-Za-z_][A-Za-z0-9_]*'), z.string().max(128 * 1024))
    .refine((e) => Object.keys(e).length <= 256, 'at most 256 env variables'),
  ports: z
    .array(z.number().int().min(1).max(65535))
    .max(16)
    .refine((p) => new Set(p).size === p.length, 'ports must be distinct'),
  gpuCount: z.number().int().min(0).max(64),
  diskGb: z.number().int().min(0).max(100_000),
  sshPublicKey: z
    .string()
    .max(8192)
    .refine((k) => !/[\r\n]/.test(k), 'ssh_public_key must be one line'),
  volume: z
    .string()
    .max(4096)
    .refine((v) => v === '' || isAbsolute(v) || VOLUME_NAME.test(v), 'volume must be an absolute path or a name of [A-Za-z0-9_.-]'),
  files: z
    .record(z.string().refine(isSafeRelativePath, 'files paths must be relative and stay inside the instance directory'), z.instanceof(Uint8Array))
    .refine((f) => Object.values(f).reduce((n, c) => n + c.byteLength, 0) <= MAX_FILES_BYTES, `files total at most ${MAX_FILES_BYTES} bytes`),
  readyTimeoutMs: z
    .number()
    .int()
    .min(0)
    .max(24 * 3600 * 1000),
});

/** Throws AgentInvalidArgumentError naming the first bad field. */
export function validateSpec(spec: LaunchSpec): LaunchSpec {
  const parsed = launchSpecSchema.safeParse(spec);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new AgentInvalidArgumentError(`spec.${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return spec;
}

/** A hash of everything in the spec (file contents included), independent of key order. */
export function specHash(spec: LaunchSpec): string {
  const h = createHash('sha256');
  const sorted = (o: Record<string, unknown>) =>
    Object.keys(o)
      .sort()
      .map((k) => [k, o[k]]);
  h.update(
    JSON.stringify([
      spec.instanceId,
      spec.image,
      spec.instanceType,
      spec.startCommand,
      sorted(spec.env),
      spec.ports,
      spec.gpuCount,
      spec.diskGb,
      spec.sshPublicKey,
      spec.volume,
      spec.readyTimeoutMs,
    ]),
  );
  for (const path of Object.keys(spec.files).sort()) {
    h.update(`\0${path}\0${spec.files[path]!.byteLength}\0`);
    h.update(spec.files[path]!);
  }
  return h.digest('hex');
}

/** The spec as stored and reported: file paths kept, contents dropped. */
export function redactSpec(spec: LaunchSpec): LaunchSpec {
  return { ...spec, env: { ...spec.env }, ports: [...spec.ports], files: Object.fromEntries(Object.keys(spec.files).map((k) => [k, new Uint8Array()])) };
}
