// The host agent `npm start` embeds: the settings' agent on `<data dir>/agent`, on containers
// when an engine answers (the seeded templates' images are built locally on first use), else on
// host processes, with a warning: that mode is for one trusted user.
import { mkdirSync } from 'node:fs';
import type { Config } from '../lib/config.js';
import { namingSetting } from '../lib/errors.js';
import type { Logger } from '../lib/log.js';
import { startAgent, type AgentHandle } from '../agent/server.js';
import { agentOptionsFromConfig, chooseRuntime } from '../agent/cli.js';
import { buildKnownImage, untagStaleLocalImages } from '../agent/images/local-images.js';

/** The running agent and the token the control plane calls it with. */
export interface LocalAgent {
  handle: AgentHandle;
  token: string;
}

/** `dataDir`: the platform's data dir, resolved. */
export async function startLocalAgent(config: Config, dataDir: string, logger: Logger): Promise<LocalAgent> {
  const agentOptions = agentOptionsFromConfig({ ...config, dataDir }, logger);
  agentOptions.runtime = await chooseRuntime(config.agentRuntime, config.agentDockerSocket);
  if (agentOptions.runtime === 'docker') {
    // The seeded images built from an older definition are built again on first use.
    const stale = await untagStaleLocalImages(config.agentDockerSocket).catch((err: unknown) => {
      logger.warn('checking the local images failed', { err });
      return [];
    });
    if (stale.length) logger.info('local images built from an older definition: rebuilt on first use', { images: stale });
    agentOptions.docker = {
      ...agentOptions.docker,
      buildLocalImage: (image, onOutput) => buildKnownImage(config.agentDockerSocket, image, onOutput),
    };
  }
  mkdirSync(agentOptions.dataDir, { recursive: true });
  const handle = await startAgent(agentOptions).catch(namingSetting('RC_AGENT_PORT'));
  return { handle, token: agentOptions.token };
}
