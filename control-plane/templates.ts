// Templates: the launch configuration an instance copies when it starts. Validation follows
// SPEC's template table; storage is `persistent_storage` (boolean) and `disk_gb` (integer,
// 100..200: the launch checks it against the GPU count's ceiling).
import { z } from 'zod';
import type { Clock } from '../lib/clock.js';
import type { Sql } from './sql.js';

export const INSTANCE_TYPES = ['jupyter', 'gradio', 'streamlit', 'comfyui', 'vllm', 'sglang', 'custom'] as const;
export type InstanceType = (typeof INSTANCE_TYPES)[number];
/** The ports the instance proxy routes: gradio, streamlit, comfyui, vllm, sglang. */
export const ROUTED_PORTS: readonly number[] = [7860, 8501, 8188, 8000, 30000];
export const DISK_GB_MIN = 100;
export const DISK_GB_MAX = 200;

const text = (max: number) => z.string().max(max).nullish();

/** The body of POST and PUT /api/profile/templates. PUT replaces: omitted fields take their defaults. */
export const templateInputSchema = z
  .strictObject({
    title: z.string().trim().min(1, 'title must not be empty').max(200),
    image: z.string().trim().min(1, 'image must not be empty').max(512),
    instance_type: z.enum(INSTANCE_TYPES).default('jupyter'),
    description: text(10_000),
    slug: z
      .string()
      .max(100)
      .regex(/^[a-z0-9]+(?:-[a-z0-9]+)*$/, 'slug must be lowercase letters, digits and single hyphens')
      .nullish(),
    category: text(100),
    tags: z.array(z.string().min(1).max(64)).max(50).default([]),
    repo_url: text(2048),
    branch: z.string().trim().min(1).max(255).default('main'),
    notebook_path: text(1024),
    start_command: text(8192),
    app_port: z
      .number()
      .int()
      .refine((p) => ROUTED_PORTS.includes(p), `app_port must be a routed port: ${ROUTED_PORTS.join(', ')}`)
      .nullish(),
    ssh_enabled: z.boolean().default(false),
    cover_url: text(2048),
    sort_order: z.number().int().min(-1_000_000).max(1_000_000).default(0),
    enabled: z.boolean().default(false),
    persistent_storage: z.boolean().default(false),
    disk_gb: z.number().int().min(DISK_GB_MIN).max(DISK_GB_MAX).default(DISK_GB_MIN),
  })
  .superRefine((t, ctx) => {
    if ((t.instance_type === 'vllm' || t.instance_type === 'sglang') && !t.start_command?.trim()) {
      ctx.addIssue({ code: 'custom', path: ['start_command'], message: `start_command is required when instance_type is ${t.instance_type}` });
    }
  });
export type TemplateInput = z.output<typeof templateInputSchema>;

/** A template as the API returns it in full. */
export interface Template {
  id: number;
  title: string;
  slug: string | null;
  image: string;
  instance_type: InstanceType;
  description: string | null;
  category: string | null;
  tags: string[];
  repo_url: string | null;
  branch: string;
  notebook_path: string | null;
  start_command: string | null;
  app_port: number | null;
  ssh_enabled: boolean;
  cover_url: string | null;
  sort_order: number;
  enabled: boolean;
  persistent_storage: boolean;
  disk_gb: number;
  created_at: string;
  updated_at: string;
}

/** One row of the owner's list: SPEC's fields. */
export type TemplateListItem = Pick<Template, 'id' | 'title' | 'slug' | 'image' | 'instance_type' | 'ssh_enabled' | 'enabled' | 'sort_order'>;

export const toListItem = (t: Template): TemplateListItem => ({
  id: t.id,
  title: t.title,
  slug: t.slug,
  image: t.image,
  instance_type: t.instance_type,
  ssh_enabled: t.ssh_enabled,
  enabled: t.enabled,
  sort_order: t.sort_order,
});

interface Row {
  id: number;
  account_id: number | null;
  title: string;
  image: string;
  instance_type: InstanceType;
  description: string | null;
  slug: string | null;
  category: string | null;
  tags: string;
  repo_url: string | null;
  branch: string;
  notebook_path: string | null;
  start_command: string | null;
  app_port: number | null;
  ssh_enabled: number;
  cover_url: string | null;
  sort_order: number;
  enabled: number;
  persistent_storage: number;
  disk_gb: number;
  created_at: number;
  updated_at: number;
}

const toTemplate = (r: Row): Template => ({
  id: r.id,
  title: r.title,
  slug: r.slug,
  image: r.image,
  instance_type: r.instance_type,
  description: r.description,
  category: r.category,
  tags: JSON.parse(r.tags) as string[],
  repo_url: r.repo_url,
  branch: r.branch,
  notebook_path: r.notebook_path,
  start_command: r.start_command,
  app_port: r.app_port,
  ssh_enabled: r.ssh_enabled === 1,
  cover_url: r.cover_url,
  sort_order: r.sort_order,
  enabled: r.enabled === 1,
  persistent_storage: r.persistent_storage === 1,
  disk_gb: r.disk_gb,
  created_at: new Date(r.created_at).toISOString(),
  updated_at: new Date(r.updated_at).toISOString(),
});

const FIELDS = [
  'title',
  'image',
  'instance_type',
  'description',
  'slug',
  'category',
  'tags',
  'repo_url',
  'branch',
  'notebook_path',
  'start_command',
  'app_port',
  'ssh_enabled',
  'cover_url',
  'sort_order',
  'enabled',
  'persistent_storage',
  'disk_gb',
] as const;

type Values = (string | number | null)[];

/** Column values in FIELDS order. `enabled` is forced false unless the owner is an editor. */
function values(t: TemplateInput, isEditor: boolean): Values {
  return [
    t.title,
    t.image,
    t.instance_type,
    t.description ?? null,
    t.slug ?? null,
    t.category ?? null,
    JSON.stringify(t.tags),
    t.repo_url ?? null,
    t.branch,
    t.notebook_path ?? null,
    t.start_command ?? null,
    t.app_port ?? null,
    t.ssh_enabled ? 1 : 0,
    t.cover_url ?? null,
    t.sort_order,
    t.enabled && isEditor ? 1 : 0,
    t.persistent_storage ? 1 : 0,
    t.disk_gb,
  ];
}

export class Templates {
  private readonly insert;
  private readonly update;
  private readonly del;
  private readonly getStmt;
  private readonly owned;
  private readonly published;
  private readonly publishedAndOwned;

  constructor(
    db: Sql,
    private readonly clock: Clock,
  ) {
    this.insert = db.prepare<[number | null, ...Values, number, number], { id: number }>(
      `INSERT INTO templates (account_id, ${FIELDS.join(', ')}, created_at, updated_at) VALUES (?, ${FIELDS.map(() => '?').join(', ')}, ?, ?) RETURNING id`,
    );
    this.update = db.prepare<[...Values, number, number, number]>(
      `UPDATE templates SET ${FIELDS.map((f) => `${f} = ?`).join(', ')}, updated_at = ? WHERE id = ? AND account_id = ?`,
    );
    this.del = db.prepare<[number, number]>('DELETE FROM templates WHERE id = ? AND account_id = ?');
    this.getStmt = db.prepare<[number], Row>('SELECT * FROM templates WHERE id = ?');
    this.owned = db.prepare<[number], Row>('SELECT * FROM templates WHERE account_id = ? ORDER BY sort_order, id');
    this.published = db.prepare<[], Row>('SELECT * FROM templates WHERE enabled = 1 ORDER BY sort_order, id');
    this.publishedAndOwned = db.prepare<[number], Row>('SELECT * FROM templates WHERE enabled = 1 OR account_id = ? ORDER BY sort_order, id');
  }

  /** Creates a template owned by `accountId` (null: a platform template, as seeded). */
  async create(accountId: number | null, t: TemplateInput, isEditor: boolean): Promise<Template> {
    const now = this.clock.now();
    const r = (await this.insert.get(accountId, ...values(t, isEditor), now, now))!;
    return (await this.get(r.id))!;
  }

  /** Replaces the caller's template; undefined when it does not exist or is not theirs. */
  async replace(accountId: number, id: number, t: TemplateInput, isEditor: boolean): Promise<Template | undefined> {
    const r = await this.update.run(...values(t, isEditor), this.clock.now(), id, accountId);
    return r.changes === 1 ? this.get(id) : undefined;
  }

  /** Deletes the caller's template; false when it does not exist or is not theirs. Running instances keep their copy. */
  async delete(accountId: number, id: number): Promise<boolean> {
    return (await this.del.run(id, accountId)).changes === 1;
  }

  async get(id: number): Promise<Template | undefined> {
    const r = await this.getStmt.get(id);
    return r && toTemplate(r);
  }

  /** The owner of a template (null for platform templates), undefined when it does not exist. */
  async ownerOf(id: number): Promise<number | null | undefined> {
    const r = await this.getStmt.get(id);
    return r ? r.account_id : undefined;
  }

  async listOwned(accountId: number): Promise<Template[]> {
    return (await this.owned.all(accountId)).map(toTemplate);
  }

  /** Published templates, plus the caller's own when `accountId` is given. */
  async listPublic(accountId?: number): Promise<(Template & { owned: boolean })[]> {
    if (accountId === undefined) return (await this.published.all()).map((r) => ({ ...toTemplate(r), owned: false }));
    return (await this.publishedAndOwned.all(accountId)).map((r) => ({ ...toTemplate(r), owned: r.account_id === accountId }));
  }
}
