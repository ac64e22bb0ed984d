import { useEffect, useState } from 'preact/hooks';
import { api, canAdmin, isOperator, onSignedOut, type Session } from './api';
import { Link } from './components/Link';
import { match, navigate, useLocation } from './router';
import { BundlePage, BundlesPage, TrustPage } from './pages/Bundles';
import { DagDiffPage } from './pages/DagDiff';
import { DagPage, DagsPage, DagVersionPage } from './pages/Dags';
import { RunPage } from './pages/Run';
import { RunsPage } from './pages/Runs';
import { SchedulePage, SchedulesPage } from './pages/Schedules';
import { SignInPage } from './pages/SignIn';
import { QueuesPage, TenantPage, TenantsPage } from './pages/Tenants';
import { TokensPage } from './pages/Tokens';
import { UsagePage } from './pages/Usage';

/** The header's pages: a tenant session sees its tenant's, a platform session the operator's. */
function navItems(session: Session): { href: string; label: string }[] {
  if (isOperator(session)) {
    return [
      { href: '/tenants', label: 'Tenants' },
      { href: '/queues', label: 'Queues' },
    ];
  }
  return [
    { href: '/runs', label: 'Runs' },
    { href: '/dags', label: 'DAGs' },
    { href: '/schedules', label: 'Schedules' },
    { href: '/bundles', label: 'Bundles' },
    { href: '/trust', label: 'Trust keys' },
    ...(canAdmin(session) ? [{ href: '/tokens', label: 'Tokens' }] : []),
    { href: '/usage', label: 'Usage' },
  ];
}

const homeOf = (session: Session) => (isOperator(session) ? '/tenants' : '/runs');

type Phase = { kind: 'loading' } | { kind: 'ready'; session: Session | null } | { kind: 'error'; message: string };

export function App() {
  const loc = useLocation();
  const [phase, setPhase] = useState<Phase>({ kind: 'loading' });

  useEffect(() => {
    // The CSRF token is never stored by the browser: it is read again with the session on each load.
    api.resume().then(
      (session) => setPhase({ kind: 'ready', session }),
      (e: unknown) => setPhase({ kind: 'error', message: e instanceof Error ? e.message : String(e) }),
    );
    return onSignedOut(() => setPhase({ kind: 'ready', session: null }));
  }, []);

  if (phase.kind === 'loading') return <p class="loading">Loading…</p>;
  if (phase.kind === 'error') {
    return (
      <main id="main">
        <h1>Ordo is not reachable</h1>
        <p role="alert">{phase.message}</p>
      </main>
    );
  }
  const session = phase.session;
  if (!session) {
    const next = loc.path === '/sign-in' ? (loc.query.get('next') ?? '/runs') : loc.path + location.search;
    return <SignInPage next={next} onSignedIn={(s) => setPhase({ kind: 'ready', session: s })} />;
  }
  if (loc.path === '/' || loc.path === '/sign-in') {
    navigate(loc.query.get('next') ?? homeOf(session), { replace: true });
    return null;
  }

  const signOut = async () => {
    await api.signOut().catch(() => undefined);
    setPhase({ kind: 'ready', session: null });
    navigate('/sign-in', { replace: true });
  };

  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Ordo</span>
        <nav aria-label="Main">
          {navItems(session).map((n) => (
            <Link
              key={n.href}
              href={n.href}
              aria-current={loc.path === n.href || loc.path.startsWith(n.href + '/') ? 'page' : undefined}
            >
              {n.label}
            </Link>
          ))}
        </nav>
        <span class="who" data-testid="who">
          {session.subject} · {session.tenantId ?? 'platform'}
        </span>
        <button type="button" onClick={() => void signOut()}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        <Page path={loc.path} query={loc.query} session={session} />
      </main>
    </>
  );
}

function Page({ path, query, session }: { path: string; query: URLSearchParams; session: Session }) {
  let p: Record<string, string> | null;
  if (isOperator(session)) return <OperatorPage path={path} query={query} />;
  if (match('/runs', path)) return <RunsPage query={query} />;
  if ((p = match('/runs/:runId', path))) return <RunPage key={p.runId} runId={p.runId} session={session} />;
  if (match('/dags', path)) return <DagsPage />;
  if ((p = match('/dags/:dagId', path))) return <DagPage key={p.dagId} dagId={p.dagId} />;
  if ((p = match('/dags/:dagId/versions/:version', path))) {
    return <DagVersionPage key={path} dagId={p.dagId} version={Number(p.version)} session={session} />;
  }
  if ((p = match('/dags/:dagId/diff', path))) {
    return <DagDiffPage dagId={p.dagId} from={Number(query.get('from'))} to={Number(query.get('to'))} />;
  }
  if (match('/schedules', path)) return <SchedulesPage />;
  if ((p = match('/schedules/:id', path))) return <SchedulePage key={p.id} id={p.id} session={session} />;
  if (match('/bundles', path)) return <BundlesPage />;
  if ((p = match('/bundles/:hash', path))) return <BundlePage key={p.hash} hash={p.hash} />;
  if (match('/trust', path)) return <TrustPage session={session} />;
  if (match('/tokens', path)) return <TokensPage />;
  if (match('/usage', path)) return <UsagePage />;
  if (match('/tenants', path) || match('/queues', path)) {
    return <NotFound home="/runs" text="This page is the platform operator's: sign in with a platform token." />;
  }
  return <NotFound home="/runs" text="There is no page at this address." />;
}

function OperatorPage({ path, query }: { path: string; query: URLSearchParams }) {
  let p: Record<string, string> | null;
  if (match('/tenants', path)) return <TenantsPage />;
  if ((p = match('/tenants/:tenantId', path))) return <TenantPage key={p.tenantId} tenantId={p.tenantId} />;
  if (match('/queues', path)) return <QueuesPage query={query} />;
  if (match('/runs', path)) {
    // Where sign-in lands by default: the operator's first page instead.
    navigate('/tenants', { replace: true });
    return null;
  }
  return (
    <NotFound
      home="/tenants"
      text="A platform session sees tenants and queues; a tenant's own pages need a token of that tenant."
    />
  );
}

function NotFound({ home, text }: { home: string; text: string }) {
  return (
    <>
      <h1>Not found</h1>
      <p>
        {text} <Link href={home}>{home === '/tenants' ? 'Tenants' : 'Runs'}</Link>
      </p>
    </>
  );
}
