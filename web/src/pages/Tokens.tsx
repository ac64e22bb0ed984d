import { useEffect, useRef, useState } from 'preact/hooks';
import { consoleApi, type MintedToken, type MintTokenRequest, type TokenRecord, type TokenScope } from '../api';
import { Action } from '../components/Action';
import { describe, useLoad } from '../components/load';
import { Scroll } from '../components/Scroll';
import { Status, time } from '../components/Status';
import { MorePager } from '../components/MorePager';

const TTLS: { label: string; seconds?: number }[] = [
  { label: 'the server default' },
  { label: '1 hour', seconds: 3600 },
  { label: '1 day', seconds: 86_400 },
  { label: '30 days', seconds: 30 * 86_400 },
  { label: '90 days', seconds: 90 * 86_400 },
  { label: '1 year', seconds: 365 * 86_400 },
];

const SCOPE_CHOICES: { scope: TokenScope; label: string }[] = [
  { scope: 'orchestrator:read', label: 'read: look at runs, DAGs, schedules' },
  { scope: 'orchestrator:write', label: 'write: also start, cancel and rerun runs' },
  { scope: 'orchestrator:admin', label: 'admin: also publish DAGs, schedules, tokens' },
  { scope: 'worker', label: 'worker: an external worker of one pool' },
];

function tokenState(t: TokenRecord): string {
  if (t.revokedAt) return 'revoked';
  return Date.parse(t.expiresAt) <= Date.now() ? 'expired' : 'active';
}

/**
 * The tenant's tokens: list, mint, revoke. A minted token's secret is shown once, in this
 * component's state only, and dropped when it is dismissed; the API never shows it again.
 */
export function TokensPage() {
  const [token, setToken] = useState<string | undefined>(undefined);
  const { data, error, reload } = useLoad(() => consoleApi.listTokens({ pageToken: token, limit: 100 }), [token]);
  const [minted, setMinted] = useState<MintedToken | null>(null);
  return (
    <>
      <h1>Tokens</h1>
      {minted ? (
        <ShownOnce minted={minted} onDismiss={() => setMinted(null)} />
      ) : (
        <MintForm
          onMinted={(m) => {
            setMinted(m);
            reload();
          }}
        />
      )}
      <h2>Tokens of this tenant</h2>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
      {data && data.items.length > 0 && (
        <Scroll label="Tokens">
          <table>
            <caption class="sr-only">Tokens, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Subject</th>
                <th scope="col">Scopes</th>
                <th scope="col">State</th>
                <th scope="col">Description</th>
                <th scope="col">Created</th>
                <th scope="col">Expires</th>
                <th scope="col">Token id</th>
                <th scope="col">Action</th>
              </tr>
            </thead>
            <tbody>
              {data.items.map((t) => (
                <tr key={t.jti} data-jti={t.jti}>
                  <td>{t.subject}</td>
                  <td>
                    {t.scopes.join(', ')}
                    {t.pool && <span class="muted"> (pool {t.pool})</span>}
                  </td>
                  <td>
                    <Status status={tokenState(t)} />
                  </td>
                  <td>{t.description ?? '—'}</td>
                  <td>
                    {time(t.createdAt)} by {t.createdBy}
                  </td>
                  <td>{time(t.expiresAt)}</td>
                  <td class="mono">{t.jti.slice(0, 8)}</td>
                  <td>
                    {!t.revokedAt && (
                      <Action
                        label="Revoke"
                        danger
                        confirm={`Revoke ${t.subject}'s token ${t.jti.slice(0, 8)}? It stops working at once.`}
                        run={() => consoleApi.revokeToken(t.jti)}
                        onDone={reload}
                      />
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      <MorePager next={data?.nextPageToken} label="More tokens" onMore={setToken} />
    </>
  );
}

function MintForm({ onMinted }: { onMinted: (m: MintedToken) => void }) {
  const [scope, setScope] = useState<TokenScope>('orchestrator:read');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const form = new FormData(e.currentTarget as HTMLFormElement);
    const text = (name: string) => {
      const v = form.get(name);
      return typeof v === 'string' && v.trim() !== '' ? v.trim() : undefined;
    };
    const ttl = TTLS[Number(form.get('ttl'))]?.seconds;
    const body: MintTokenRequest = {
      scopes: [scope],
      subject: text('subject'),
      description: text('description'),
      ...(ttl ? { ttlSeconds: ttl } : {}),
      ...(scope === 'worker' ? { pool: text('pool') } : {}),
    };
    setBusy(true);
    setError(null);
    try {
      onMinted(await consoleApi.mintToken(body));
    } catch (err) {
      setError(describe(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="mint" onSubmit={(e) => void submit(e)} aria-labelledby="mint-h">
      <h2 id="mint-h">Mint a token</h2>
      <fieldset>
        <legend>Scope</legend>
        {SCOPE_CHOICES.map((c) => (
          <label key={c.scope} class="choice">
            <input
              type="radio"
              name="scope"
              value={c.scope}
              checked={scope === c.scope}
              onChange={() => setScope(c.scope)}
            />
            {c.label}
          </label>
        ))}
      </fieldset>
      <div class="filters">
        <label>
          Subject
          <input name="subject" maxLength={200} pattern="[!-~]+" placeholder="who or what uses it" />
        </label>
        {scope === 'worker' && (
          <label>
            Pool
            <input name="pool" required pattern="[a-z0-9][a-z0-9_-]{0,62}" />
          </label>
        )}
        <label>
          Expires after
          <select name="ttl">
            {TTLS.map((t, i) => (
              <option key={t.label} value={i}>
                {t.label}
              </option>
            ))}
          </select>
        </label>
        <label>
          Description
          <input name="description" maxLength={500} />
        </label>
        <button type="submit" disabled={busy}>
          Mint token
        </button>
      </div>
      <p class="help">A token never holds more scopes than the session that mints it.</p>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
    </form>
  );
}

/** The secret, once: copied from here or lost. Dismissing it drops it from the page. */
function ShownOnce({ minted, onDismiss }: { minted: MintedToken; onDismiss: () => void }) {
  const panel = useRef<HTMLElement>(null);
  const [copied, setCopied] = useState<string | null>(null);
  useEffect(() => panel.current?.focus(), []);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(minted.token);
      setCopied('Copied to the clipboard.');
    } catch {
      setCopied('The browser refused the clipboard: select the token and copy it.');
    }
  };
  return (
    <section class="once" ref={panel} tabIndex={-1} aria-labelledby="once-h" data-testid="minted">
      <h2 id="once-h">Copy the new token now</h2>
      <p>
        It is shown once: Ordo does not keep it, and this page forgets it when you press Done. Token id{' '}
        <span class="mono">{minted.jti}</span>, {minted.scopes.join(', ')}, expires {time(minted.expiresAt)}.
      </p>
      <label for="minted-token">Token</label>
      <textarea
        id="minted-token"
        class="mono"
        readOnly
        rows={4}
        value={minted.token}
        onFocus={(e) => e.currentTarget.select()}
        data-testid="minted-token"
      />
      <div class="actions">
        <button type="button" onClick={() => void copy()}>
          Copy token
        </button>
        <button type="button" onClick={onDismiss}>
          Done
        </button>
        <span role="status">{copied}</span>
      </div>
    </section>
  );
}
