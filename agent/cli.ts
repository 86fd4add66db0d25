// `rc agent`: runs the host agent from the settings (lib/config.ts), options overriding them.
// Prints one JSON line to stdout once listening: {"address","port","agentId","tokenFile"}.
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join, resolve } from 'node:path';
import { closeOnSignal, numberOption, parse, UsageError, type Command, portOption } from '../lib/cli.js';
import { loadConfig, type Config } from '../lib/config.js';
import { generateKey } from '../lib/keys.js';
import { createLogger, type Logger } from '../lib/log.js';
import { startAgent, type AgentOptions } from './server.js';
import type { RuntimeKind } from './types.js';

const HELP = `Usage: rc agent [options]

Runs the host agent: a gRPC server the control plane uses to start and stop instances on this host.
Instances keep running when the agent stops; the next agent on the same data dir adopts them.

Options:
  --host H          Address to bind (RC_HOST, default 127.0.0.1)
  --port P          gRPC port; 0 picks a free one (RC_AGENT_PORT, default 7070)
  --data-dir D      Platform data dir; the agent uses D/agent (RC_DATA_DIR, default ./data)
  --runtime R       auto, docker or process (RC_AGENT_RUNTIME, default auto: docker when an engine answers)
  --gpus N          Simulated GPUs when nvidia-smi is absent (RC_AGENT_GPUS, default 4)
  --token-file F    Read the shared token from F (default: RC_AGENT_TOKEN, else D/agent/token, generated if missing)
  -h, --help        This help
`;

/** The agent's own directory inside the platform data dir. */
export function agentDir(dataDir: string): string {
  return resolve(dataDir, 'agent');
}

/**
 * The shared agent token: `configured` when set, else the token file in the agent dir (created
 * with a fresh random token, mode 0600, on first use). The control plane reads the same file.
 */
export function resolveAgentToken(dir: string, configured = ''): { token: string; tokenFile: string | undefined } {
  if (configured) return { token: configured, tokenFile: undefined };
  const tokenFile = join(dir, 'token');
  if (!existsSync(tokenFile)) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(tokenFile, generateKey() + '\n', { mode: 0o600, flag: 'wx' });
  }
  chmodSync(tokenFile, 0o600);
  return { token: readFileSync(tokenFile, 'utf8').trim(), tokenFile };
}

/**
 * startAgent options from the platform settings (what `rc agent` and `npm start` use). The token
 * comes from RC_AGENT_TOKEN, else the token file in <dataDir>/agent (generated when missing).
 */
export function agentOptionsFromConfig(config: Config, logger: Logger): AgentOptions & { tokenFile: string | undefined } {
  const dir = agentDir(config.dataDir);
  const { token, tokenFile } = resolveAgentToken(dir, config.agentToken);
  return {
    host: config.host,
    port: config.agentPort,
    token,
    tokenFile,
    dataDir: dir,
    gpus: { detect: config.agentGpuDetect, count: config.agentGpus, model: config.agentGpuModel, memoryMb: config.agentGpuMemoryMb },
    gpuSampleMs: config.agentGpuSampleMs,
    advertiseHost: config.agentAdvertiseHost || undefined,
    readyTimeoutMs: config.agentReadyTimeoutMs,
    servingReadyTimeoutMs: config.agentServingReadyTimeoutMs,
    stopGraceMs: config.agentStopGraceMs,
    logCap: { fileBytes: config.agentLogFileBytes, files: config.agentLogFiles },
    lostControlPlaneGraceMs: config.agentLostControlPlaneMs,
    dockerSocket: config.agentDockerSocket,
    instancesDir: config.agentInstancesDir || `${resolve(config.dataDir)}-instances`,
    processUser: config.agentProcessUser,
    processUntrusted: config.agentProcessUntrusted,
    docker: {
      pullPolicy: config.agentPullPolicy,
      publishHost: config.agentPublishHost,
      limitsPerGpu: { memoryMb: config.agentMemoryMbPerGpu, cpus: config.agentCpusPerGpu, pids: config.agentPidsPerGpu },
      diskQuota: config.agentDiskQuota,
      relayPerInstance: config.tunnelRelayPerInstance,
      toolbox: config.agentToolbox,
      isolation: {
        firewall: config.agentFirewall,
        pool: config.agentNetworkPool,
        prefix: config.agentNetworkPrefix,
        blocked: config.agentFirewallBlock,
      },
    },
    logger,
  };
}

/** True when a Docker engine answers /_ping on `socketPath`. */
export function dockerAnswers(socketPath: string, timeoutMs = 2000): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ socketPath, path: '/_ping', timeout: timeoutMs }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.end();
  });
}

/** The warning printed when instances will run as host processes, with its cause. */
export const processRuntimeWarning = (cause: string): string =>
  `${cause}: instances run as host processes (the process runtime). This mode is for one trusted user on their own machine; see agent/README.md.`;

/**
 * The runtime to use: `auto` is docker when an engine answers on the socket, else process, with
 * the warning printed to stderr (the process runtime is for one trusted user on their own machine).
 */
export async function chooseRuntime(
  setting: Config['agentRuntime'],
  socketPath: string,
  warn: (message: string) => void = (m) => process.stderr.write(`warning: ${m}\n`),
): Promise<RuntimeKind> {
  if (setting === 'docker' || setting === 'process') {
    if (setting === 'process') warn(processRuntimeWarning('RC_AGENT_RUNTIME=process'));
    return setting;
  }
  if (await dockerAnswers(socketPath)) return 'docker';
  warn(processRuntimeWarning('No Docker engine answers'));
  return 'process';
}

export const agentCommand: Command = {
  summary: 'Run the host agent',
  async run(argv) {
    const { values } = parse(argv, {
      host: { type: 'string' },
      port: { type: 'string' },
      'data-dir': { type: 'string' },
      runtime: { type: 'string' },
      gpus: { type: 'string' },
      'token-file': { type: 'string' },
    });
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    const config = loadConfig();
    const port = portOption(values.port) ?? config.agentPort;
    const gpuCount = numberOption('gpus', values.gpus, { integer: true, min: 0 }) ?? config.agentGpus;
    const setting = values.runtime ?? config.agentRuntime;
    if (setting !== 'process' && setting !== 'docker' && setting !== 'auto')
      throw new UsageError(`--runtime must be auto, process or docker, got ${JSON.stringify(setting)}`);
    if (values['data-dir']) config.dataDir = values['data-dir'];
    let tokenFile: string | undefined;
    if (values['token-file']) {
      tokenFile = resolve(values['token-file']);
      try {
        config.agentToken = readFileSync(tokenFile, 'utf8').trim();
      } catch (err) {
        throw new UsageError(`--token-file: cannot read ${tokenFile}: ${(err as Error).message}`);
      }
      if (config.agentToken.length < 16) throw new UsageError('--token-file: the token must be at least 16 characters');
    }
    const logger = createLogger(config.logLevel);
    const options = agentOptionsFromConfig(config, logger);
    const runtime = await chooseRuntime(setting, config.agentDockerSocket);
    tokenFile ??= options.tokenFile;
    const handle = await startAgent({ ...options, host: values.host ?? config.host, port, runtime, gpus: { ...options.gpus, count: gpuCount } });
    process.stdout.write(JSON.stringify({ address: handle.address, port: handle.port, agentId: handle.agentId, tokenFile }) + '\n');
    return closeOnSignal(() => handle.close(), logger);
  },
};
