// Launching an instance: SPEC's launch rules in their order, and the accepted launch written as a
// queued (pending, unplaced) instance with a snapshot of its template. Placement (placement.ts)
// takes it from the queue.
import { randomBytes } from 'node:crypto';
import type { Account } from '../accounts.js';
import { API_ERRORS } from '../errors.js';
import type { Template } from '../templates.js';
import { MICROS_PER_CREDIT } from './billing.js';
import type { InstanceContext } from './context.js';
import {
  diskTooLarge,
  gpuCountInvalid,
  gpuCountTooLarge,
  insufficientCredits,
  launchRateLimited,
  launchTokenInvalid,
  launchVerificationRequired,
  oneActiveInstance,
} from './errors.js';
import type { InstanceLifecycle } from './lifecycle.js';
import type { Placement } from './placement.js';
import { parseRateWindows, type RateWindow } from './settings.js';
import type { InstanceRow, TemplateSnapshot } from './store.js';
import type { Repositories } from '../store.js';
import { isUniqueViolation } from '../sql.js';

export const GPU_COUNTS: readonly number[] = [1, 2, 4];
/** Disk ceiling (GB) per GPU count (SPEC Limits); the floor is 100 GB. */
export const DISK_CEILING_GB: Readonly<Record<number, number>> = { 1: 100, 2: 150, 4: 200 };

export interface LaunchInput {
  gpu_count?: unknown;
  launch_verification_token?: unknown;
}

/** A request that passed the checks made before the transaction. */
interface LaunchRequest {
  template: Template;
  gpus: number;
  token: unknown;
}

/**
 * What an instance keeps of its template; the account's SSH key is copied when the template enables
 * SSH, and whether the image serves SSH (its catalog entry now: an operator's later change applies
 * to later launches).
 */
function templateSnapshot(template: Template, account: Account, imageSsh: boolean): TemplateSnapshot {
  return {
    id: template.id,
    title: template.title,
    image: template.image,
    instance_type: template.instance_type,
    repo_url: template.repo_url,
    branch: template.branch,
    notebook_path: template.notebook_path,
    start_command: template.start_command,
    app_port: template.app_port,
    ssh_enabled: template.ssh_enabled,
    persistent_storage: template.persistent_storage,
    disk_gb: template.disk_gb,
    ssh_public_key: template.ssh_enabled ? account.sshPublicKey : null,
    image_ssh: imageSsh,
  };
}

export class Launcher {
  readonly windows: RateWindow[];

  constructor(
    private readonly ctx: InstanceContext,
    private readonly lifecycle: InstanceLifecycle,
    private readonly placement: Placement,
  ) {
    this.windows = parseRateWindows(ctx.settings.instanceLaunchRate);
  }

  /**
   * Launches `templateId` for `account`. Checks in this order: verified (403), template visible
   * (404), gpu_count (400), gpu_count that no host can hold (400), launch verification token present (403), then in one transaction:
   * token valid (403), image enabled (400), disk ceiling (400), no active instance (400),
   * credits (400), launch rate (429). Nothing is written unless every check passes.
   * Returns the new instance as it is after the queue was scheduled.
   */
  async launch(account: Account, templateId: number, input: LaunchInput): Promise<InstanceRow> {
    const request = await this.check(account, templateId, input);
    const now = this.ctx.clock.now();
    // A DNS label (lowercase hex): the id is the first label of the app's own origin on the
    // instance proxy (lib/instance-origin.ts).
    const id = `inst-${randomBytes(12).toString('hex')}`;
    await this.admit(account, request, id, now);
    const { instances } = this.ctx.store;
    const row = (await instances.get(id))!;
    this.lifecycle.changed(row);
    this.ctx.log.info('instance launched', { instanceId: id, accountId: account.id, templateId, gpus: request.gpus });
    await this.placement.schedule();
    return (await instances.get(id))!;
  }

  /** The checks that need no transaction: verified, template visible, gpu_count, token present. */
  private async check(account: Account, templateId: number, input: LaunchInput): Promise<LaunchRequest> {
    const { store } = this.ctx;
    if (!account.verified) throw API_ERRORS.accountNotVerified();
    const template = await store.templates.get(templateId);
    const owner = await store.templates.ownerOf(templateId);
    if (!template || (!template.enabled && owner !== account.id)) throw API_ERRORS.templateNotFound();
    const gpus = input.gpu_count ?? 1;
    if (typeof gpus !== 'number' || !GPU_COUNTS.includes(gpus)) throw gpuCountInvalid();
    // A launch no host can ever hold would wait forever, holding the account's one slot.
    const largest = this.placement.largestHost();
    if (largest !== undefined && gpus > largest) throw gpuCountTooLarge(gpus, Math.max(0, ...GPU_COUNTS.filter((n) => n <= largest)));
    const token = input.launch_verification_token;
    if (token !== undefined && token !== null && (typeof token !== 'string' || token.length > 256)) {
      throw API_ERRORS.validation('launch_verification_token must be a string');
    }
    if (account.launchVerification && !token) throw launchVerificationRequired();
    return { template, gpus, token };
  }

  /**
   * The checks that need the transaction, then the instance and the accepted launch written in it.
   * The image is read once, in the transaction: whether it is enabled and whether it serves SSH
   * (the snapshot's image_ssh) are what held at the launch, together.
   */
  private async admit(account: Account, { template, gpus, token }: LaunchRequest, id: string, now: number): Promise<void> {
    const { store, settings } = this.ctx;
    await store.transaction(async (tx) => {
      const { instances } = tx;
      if (account.launchVerification && !(await instances.consumeLaunchToken(account.id, token as string, now))) throw launchTokenInvalid();
      const image = await tx.images.get(template.image);
      if (!image?.enabled) throw API_ERRORS.invalidImage();
      const ceiling = DISK_CEILING_GB[gpus]!;
      if (template.disk_gb > ceiling) throw diskTooLarge(template.disk_gb, ceiling, gpus);
      if (await instances.active(account.id)) throw oneActiveInstance();
      if ((await tx.ledger.balance(account.id)) < gpus) throw insufficientCredits();
      const wait = await this.launchWait(account.id, now, tx);
      if (wait > 0) throw launchRateLimited(Math.max(1, Math.ceil(wait / 1000)));
      try {
        await instances.insert({
          id,
          accountId: account.id,
          templateId: template.id,
          template: templateSnapshot(template, account, image.ssh),
          gpuCount: gpus,
          diskGb: template.disk_gb,
          microsPerHour: Math.round(settings.instanceCreditsPerGpuHour * gpus * MICROS_PER_CREDIT),
          periodMs: settings.instanceBillingPeriodSec * 1000,
          now,
        });
      } catch (err) {
        // The partial unique index: a concurrent launch of this account won.
        if (isUniqueViolation(err)) throw oneActiveInstance();
        throw err;
      }
      await instances.recordLaunch(account.id, now);
    });
  }

  /** How long (ms) until the account may launch again; 0 when it may now. The longest wait of every full window. */
  async launchWait(accountId: number, now: number, repos: Repositories = this.ctx.store): Promise<number> {
    const longest = Math.max(0, ...this.windows.map((w) => w.ms));
    const times = await repos.instances.launchTimes(accountId, now - longest);
    let wait = 0;
    for (const w of this.windows) {
      const inWindow = times.filter((t) => t > now - w.ms);
      if (inWindow.length >= w.max) wait = Math.max(wait, inWindow[w.max - 1]! + w.ms - now);
    }
    return wait;
  }
}
