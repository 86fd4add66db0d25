// Whether the docker engine can give a container the GPUs nvidia-smi found. The engine serves a
// device request with `Driver: "nvidia"` (what createContainerRequest sends) only when its host has
// the NVIDIA Container Toolkit: moby registers its `nvidia` device driver when
// `nvidia-container-runtime-hook` is on dockerd's PATH (daemon/nvidia_linux.go in moby/moby), and
// `nvidia-ctk runtime configure --runtime=docker` adds the `nvidia` runtime that GET /info lists
// under `Runtimes`. Without either, every GPU launch would fail at container create with the
// engine's words ("could not select device driver \"nvidia\" with capabilities: [[gpu]]"); the
// agent refuses GPU launches at once instead, saying what to install.
//
// CDI: engines from API 1.44 list `CDISpecDirs`, and newer ones `DiscoveredDevices`, but the agent
// speaks API 1.41-1.43 (docker-api.ts), where /info has neither, and it requests GPUs through the
// `nvidia` driver, not CDI names: a CDI-only engine is therefore treated as one without support.
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

export const NVIDIA_HOOK = 'nvidia-container-runtime-hook';

/** What the docker runtime learns about GPU support at start (after GET /info). */
export interface EngineGpuSupport {
  /** True when the engine can run containers with NVIDIA GPUs. */
  ok: boolean;
  /** How it can (`nvidia runtime`, `nvidia-container-runtime-hook`), or why not. */
  detail: string;
}

/** Runtimes of a GET /info answer whose name says NVIDIA (`nvidia`, and the `nvidia-cdi`/`nvidia-legacy` nvidia-ctk adds). */
export function nvidiaRuntimes(info: unknown): string[] {
  const runtimes = (info as { Runtimes?: Record<string, unknown> } | undefined)?.Runtimes;
  return runtimes && typeof runtimes === 'object' ? Object.keys(runtimes).filter((name) => /^nvidia/i.test(name)) : [];
}

/**
 * Where `nvidia-container-runtime-hook` is on this host, if anywhere: the agent runs on the engine's
 * host (it mounts host paths into containers), so the hook dockerd would find is on the agent's PATH
 * or in the directories the toolkit's packages install to.
 */
export function findNvidiaHook(path = process.env.PATH ?? ''): string | undefined {
  const dirs = [...path.split(delimiter).filter(Boolean), '/usr/bin', '/usr/local/bin'];
  for (const dir of dirs) if (existsSync(join(dir, NVIDIA_HOOK))) return join(dir, NVIDIA_HOOK);
  return undefined;
}

export const GPU_RUNTIME_INSTALL_HINT =
  'Install the NVIDIA Container Toolkit on this host (package nvidia-container-toolkit), run `nvidia-ctk runtime configure --runtime=docker` and restart the docker engine, then restart the agent.';

/**
 * Why a launch of `gpuCount` GPUs cannot work on this host, or undefined: only real GPUs (found by
 * nvidia-smi) are requested from the engine, and only a runtime that reports `support` (docker)
 * needs the engine's help; host processes use the host's driver.
 */
export function gpuLaunchRefusal(gpuCount: number, source: 'nvidia-smi' | 'configured', support: EngineGpuSupport | undefined): string | undefined {
  if (gpuCount === 0 || source !== 'nvidia-smi' || !support || support.ok) return undefined;
  return support.detail;
}

/** Judges an engine from its GET /info answer and the hook lookup. */
export function engineGpuSupport(info: unknown, hook: string | undefined = findNvidiaHook()): EngineGpuSupport {
  const runtimes = nvidiaRuntimes(info);
  if (runtimes.length) return { ok: true, detail: `engine runtime ${runtimes.join(', ')}` };
  if (hook) return { ok: true, detail: hook };
  return {
    ok: false,
    detail: `This host has NVIDIA GPUs but its docker engine cannot give them to containers: GET /info lists no nvidia runtime and ${NVIDIA_HOOK} is not installed. ${GPU_RUNTIME_INSTALL_HINT}`,
  };
}
