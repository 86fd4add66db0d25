// Where an instance's things live on the host, and what is written there before it starts: its
// directory under the data dir (the log), its home outside it (the spec's files, the SSH key;
// the working directory of a process, /rc in a container), and its persistent volume.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { LaunchSpec, RuntimeKind } from './types.js';

export class InstanceFiles {
  /**
   * @param agentDir the agent's data dir (instance dirs and logs, 0700: the agent's only).
   * @param instancesRoot homes (`homes/<id>`) and named process volumes (`volumes/<name>`):
   *   outside the data dir, so an instance never needs (nor gets) a way into it.
   */
  constructor(
    private readonly agentDir: string,
    private readonly instancesRoot: string,
  ) {}

  instanceDir(id: string): string {
    return join(this.agentDir, 'instances', id);
  }

  /** The instance's working directory and the root of its files (outside the data dir). */
  homeDir(id: string): string {
    return join(this.instancesRoot, 'homes', id);
  }

  logFile(id: string): string {
    return join(this.instanceDir(id), 'instance.log');
  }

  /**
   * Creates the instance's directory and home, writes the spec's files (0600) and the SSH key;
   * returns the host path of its volume (a path volume, or a named one of the process runtime,
   * created here; a named docker volume is the engine's), undefined without one.
   */
  provision(spec: LaunchSpec, runtime: RuntimeKind): { instanceDir: string; homeDir: string; volumePath: string | undefined } {
    const instanceDir = this.instanceDir(spec.instanceId);
    const homeDir = this.homeDir(spec.instanceId);
    mkdirSync(instanceDir, { recursive: true });
    mkdirSync(homeDir, { recursive: true, mode: 0o700 });
    for (const [path, content] of Object.entries(spec.files)) {
      const target = join(homeDir, path);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, content, { mode: 0o600 });
    }
    if (spec.sshPublicKey) {
      mkdirSync(join(homeDir, '.ssh'), { recursive: true, mode: 0o700 });
      writeFileSync(join(homeDir, '.ssh', 'authorized_keys'), spec.sshPublicKey + '\n', { mode: 0o600 });
    }
    let volumePath: string | undefined;
    if (spec.volume) {
      const isPath = spec.volume.startsWith('/');
      volumePath = isPath ? spec.volume : join(this.instancesRoot, 'volumes', spec.volume);
      if (runtime === 'process' || isPath) mkdirSync(volumePath, { recursive: true });
    }
    return { instanceDir, homeDir, volumePath };
  }

  /** Everything of the instance but its volume. */
  remove(id: string): void {
    rmSync(this.instanceDir(id), { recursive: true, force: true });
    rmSync(this.homeDir(id), { recursive: true, force: true });
  }
}
