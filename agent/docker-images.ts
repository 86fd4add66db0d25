// The docker runtime's images: present per the pull policy before a container is created. A
// local image is used as it is (if-not-present); an image the project knows how to build
// (npm start's seeded ones) is built here; anything else is pulled, its layers and bytes
// reported as the pending message.
import * as api from './docker-api.js';
import { DockerEngine } from './docker-engine.js';
import { FailureReason } from './errors.js';
import { buildStepMessage } from './images/build.js';
import { StartFailure, type StartContext } from './runtime.js';

export interface ImageSettings {
  pullPolicy: api.PullPolicy;
  /** Builds an image the project knows how to build locally, giving `onOutput` each line of docker build's output (its `Step k/n` lines become the pending message); false when it does not know it. */
  buildLocalImage?: (image: string, onOutput: (line: string) => void) => Promise<boolean>;
}

export class DockerImages {
  constructor(
    private readonly engine: DockerEngine,
    private readonly settings: ImageSettings,
  ) {}

  /** The image's environment; undefined when it is not on this host. */
  private async imageEnv(image: string): Promise<string[] | undefined> {
    const r = await this.engine.call(api.imageInspectRequest(image));
    if (r.status === 404) return undefined;
    if (r.status !== 200) throw new StartFailure(FailureReason.pullFailed, `Inspecting ${image} failed: ${DockerEngine.message(r)}`);
    return (r.json as { Config?: { Env?: string[] | null } }).Config?.Env ?? [];
  }

  /** Makes the image present per the pull policy; returns its environment (for PATH). */
  async ensure(image: string, ctx: StartContext): Promise<string[]> {
    const env = await this.imageEnv(image);
    if (!api.shouldPull(this.settings.pullPolicy, env !== undefined)) {
      if (env) return env;
      throw new StartFailure(FailureReason.pullFailed, `Image ${image} is not present on this host and the pull policy is "never"`);
    }
    if (env === undefined && this.settings.buildLocalImage) {
      ctx.onProgress('building image');
      // Each Dockerfile step the build starts becomes the pending message (step k/n).
      const onOutput = (line: string) => {
        const step = buildStepMessage(line);
        if (step) ctx.onProgress(step);
      };
      if (
        await this.settings.buildLocalImage(image, onOutput).catch((err: unknown) => {
          throw new StartFailure(FailureReason.pullFailed, `Building ${image} failed: ${(err as Error).message}`);
        })
      ) {
        return (await this.imageEnv(image)) ?? [];
      }
    }
    await this.pull(image, ctx);
    const after = await this.imageEnv(image);
    if (!after) throw new StartFailure(FailureReason.pullFailed, `Image ${image} is still missing after the pull`);
    return after;
  }

  /** Pulls the image, reporting layers and bytes; throws StartFailure(pull_failed) with the engine's message. */
  private async pull(image: string, ctx: StartContext): Promise<void> {
    ctx.onProgress('pulling image');
    const req = api.pullRequest(image);
    let res;
    try {
      res = await this.engine.longLived(req, { signal: ctx.signal });
    } catch (err) {
      throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${(err as Error).message}`);
    }
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      let message = text;
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? text;
      } catch {
        // Not JSON: the text as it is.
      }
      throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${message.trim().slice(0, 2000)}`);
    }
    const progress = new api.PullProgress();
    let last = 0;
    for await (const line of api.streamLines(res.body)) {
      let parsed: api.PullLine;
      try {
        parsed = JSON.parse(line) as api.PullLine;
      } catch {
        continue;
      }
      const p = progress.push(parsed);
      if (typeof p !== 'string') throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${p.error}`);
      // At most a few status changes per second: each one is an event and a state-file write.
      if (Date.now() - last >= 500) {
        last = Date.now();
        ctx.onProgress(p);
      }
    }
  }
}
