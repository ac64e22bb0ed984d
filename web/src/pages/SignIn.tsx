import { useState } from 'preact/hooks';
import { api, ApiError, type Session } from '../api';
import { navigate } from '../router';

/**
 * Exchanges a pasted API token for a session cookie. The token goes to the API once and is not kept
 * by the page; scripts never see the cookie.
 */
export function SignInPage({ next, onSignedIn }: { next: string; onSignedIn: (s: Session) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const s = await api.signIn(token.trim());
      setToken('');
      navigate(next.startsWith('/') && !next.startsWith('//') ? next : '/runs', { replace: true });
      onSignedIn(s);
    } catch (err) {
      setError(err instanceof ApiError ? `${err.message} (${err.code})` : 'The API could not be reached.');
    } finally {
      setBusy(false);
    }
  };

  return (
    <main id="main" class="signin">
      <h1>Sign in to Ordo</h1>
      <form onSubmit={(e) => void submit(e)}>
        <label for="token">API token</label>
        <textarea
          id="token"
          name="token"
          rows={4}
          required
          autocomplete="off"
          spellcheck={false}
          value={token}
          onInput={(e) => setToken(e.currentTarget.value)}
          aria-describedby="token-help"
        />
        <p id="token-help" class="help">
          Paste a token of your tenant. It is exchanged for a session cookie and not stored in the page.
        </p>
        {error && (
          <p role="alert" class="error">
            {error}
          </p>
        )}
        <button type="submit" disabled={busy || token.trim() === ''}>
          Sign in
        </button>
      </form>
    </main>
  );
}
