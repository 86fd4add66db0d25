// Template endpoints of SPEC: the owner's CRUD under /api/profile/templates and the public list.
import type { Caller } from './auth.js';
import type { ApiDeps } from './deps.js';
import { API_ERRORS } from './errors.js';
import { route, type Route } from './router.js';
import { templateInputSchema, toListItem, type TemplateInput } from './templates.js';

/** A path id: a positive integer, otherwise the template cannot exist (404). */
function templateId(raw: string | undefined): number {
  if (!raw || !/^[1-9][0-9]{0,14}$/.test(raw)) throw API_ERRORS.templateNotFound();
  return Number(raw);
}

export function templateRoutes(deps: ApiDeps): Route[] {
  const { store } = deps;
  const checkImage = async (t: TemplateInput) => {
    if (!(await store.images.isEnabled(t.image))) throw API_ERRORS.invalidImage();
  };
  /** Adds `image_ssh` to listed templates: whether their image serves SSH (false when it left the catalog). */
  const withImageSsh = async <T extends { image: string }>(list: T[]): Promise<(T & { image_ssh: boolean })[]> => {
    const ssh = new Map((await store.images.list()).map((i) => [i.image, i.ssh]));
    return list.map((t) => ({ ...t, image_ssh: ssh.get(t.image) === true }));
  };
  return [
    route({
      method: 'get',
      path: '/api/profile/templates',
      summary: "The caller's templates and the selectable images",
      access: 'required',
      handle: async (_req, caller: Caller) => ({
        body: { templates: await withImageSsh((await store.templates.listOwned(caller.account.id)).map(toListItem)), images: await store.images.enabled() },
      }),
    }),
    route({
      method: 'get',
      path: '/api/profile/templates/:id',
      summary: "One of the caller's templates, in full",
      access: 'required',
      async handle({ params }, caller: Caller) {
        const id = templateId(params[0]);
        if ((await store.templates.ownerOf(id)) !== caller.account.id) throw API_ERRORS.templateNotFound();
        return { body: await store.templates.get(id) };
      },
    }),
    route({
      method: 'post',
      path: '/api/profile/templates',
      summary: 'Create a template',
      access: 'required',
      body: templateInputSchema,
      async handle({ body }, caller: Caller) {
        await checkImage(body);
        return { body: await store.templates.create(caller.account.id, body, caller.account.isEditor) };
      },
    }),
    route({
      method: 'put',
      path: '/api/profile/templates/:id',
      summary: 'Replace a template (omitted fields take their defaults)',
      access: 'required',
      body: templateInputSchema,
      async handle({ params, body }, caller: Caller) {
        const id = templateId(params[0]);
        if ((await store.templates.ownerOf(id)) !== caller.account.id) throw API_ERRORS.templateNotFound();
        await checkImage(body);
        const t = await store.templates.replace(caller.account.id, id, body, caller.account.isEditor);
        if (!t) throw API_ERRORS.templateNotFound();
        return { body: t };
      },
    }),
    route({
      method: 'del',
      path: '/api/profile/templates/:id',
      summary: 'Delete a template (running instances keep their copy)',
      access: 'required',
      async handle({ params }, caller: Caller) {
        const id = templateId(params[0]);
        if (!(await store.templates.delete(caller.account.id, id))) throw API_ERRORS.templateNotFound();
        return { body: { success: true } };
      },
    }),
    route({
      method: 'get',
      path: '/api/templates',
      summary: "Published templates, plus the caller's own with a credential",
      access: 'optional',
      handle: async (_req, caller) => ({ body: { templates: await withImageSsh(await store.templates.listPublic(caller?.account.id)) } }),
    }),
  ];
}
