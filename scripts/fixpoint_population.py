"""Population-level check (PLATEAU_NOTES.md §2): exact expected first-token gradient of a shared
walk-vs-shortcut logit per estimator, enumerating all outcomes of a group of G = 8.
A walk of depth d is right with prob acc(d); a shortcut only at depth 1 (prob 0.95). tokw: the
first-token weight 1/length of seq-mean-token-mean (GRPO and the budget on GRPO); Dr.GRPO/RLOO
weigh every token alike. Run: python3 scripts/fixpoint_population.py"""
from math import comb
G=8
def adv(r, est):
    m=sum(r)/G
    if est=='grpo':
        if all(x==r[0] for x in r): return [0]*G
        sd=(sum((x-m)**2 for x in r)/(G-1))**.5
        return [(x-m)/(sd+1e-6) for x in r]
    s=sum(r)
    if est=='budget':
        if s==0: return [0]*G
        return [x/s-1/G for x in r]
    return [x-m for x in r]
def eg(w,a,sc,est,Lw,Ls,tokw):
    tot=0
    for k in range(G+1):
        pk=comb(G,k)*w**k*(1-w)**(G-k)
        for j in range(k+1):
            pj=comb(k,j)*a**j*(1-a)**(k-j)
            for m in range(G-k+1):
                pm=comb(G-k,m)*sc**m*(1-sc)**(G-k-m)
                r=[1]*j+[0]*(k-j)+[1]*m+[0]*(G-k-m)
                A=adv(r,est)
                if tokw: sc_=[(1-w)/Lw]*k+[-w/Ls]*(G-k)
                else: sc_=[(1-w)]*k+[-w]*(G-k)
                tot+=pk*pj*pm*sum(x*y for x,y in zip(A,sc_))
    return tot/G
e=0.3; acc=lambda d: (1-e)**d+(1-(1-e)**d)*0.3
for q in [0.4,0.5,0.6]:
  for w in [0.15,0.4]:
    out=[]
    for est,tw in [('grpo',1),('budget',1),('dr',0)]:
        g1=eg(w,acc(1)*0.95,0.95,est,6,3,tw)
        gd=sum(eg(w,acc(d),0,est,2*d+4,3,tw) for d in range(2,7))/5
        out.append(f"{est} {q*g1+(1-q)*gd:+.4f}")
    print(q,w,out)
print('---')
for e,accd in [(0.3,0.3),(0.35,0.2),(0.4,0.2)]:
  acc=lambda d: (1-e)**d+(1-(1-e)**d)*accd
  for q in [0.6,0.7,0.75]:
    w=0.15
    out=[]
    for est,tw in [('grpo',1),('budget',1),('dr',0),('rloo',0)]:
        ee='dr' if est=='rloo' else est
        g1=eg(w,acc(1)*0.95,0.95,ee,6,3,tw)
        gd=sum(eg(w,acc(d),0,ee,2*d+4,3,tw) for d in range(2,7))/5
        out.append(f"{est} {q*g1+(1-q)*gd:+.4f}")
    print(e,accd,q,w,out, 'walk-all', round(q*acc(1)+(1-q)*sum(acc(d) for d in range(2,7))/5,2))
