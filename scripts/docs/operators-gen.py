# Fills the operators guide template with captured output (see operators-capture.sh).
import re, sys
out, template, dest, bindir = sys.argv[1] + '/', sys.argv[2], sys.argv[3], sys.argv[4]
t=open(template).read()
def rd(n): return open(out+n+'.txt').read()
vals={}
import os
for f in sorted(os.listdir(out)):
    if f.endswith('.txt'):
        vals[f[:-4]]=rd(f[:-4])
ls=rd('ls').splitlines()
vals['mockd-stderr']=vals['mockd-stderr'].replace('[exit status 0]\n','')
vals['ls-first']='\n'.join(ls[:3])+'\n'
g=rd('gone').splitlines()
vals['gone-body']='\n'.join(g[1:])+'\n'
# the busy example: show the command with DAVINCI_DEVICE and relative binary name
vals['busy']=vals['busy'].replace(bindir,'')
def sub(m):
    k=m.group(1)
    v=vals[k]
    if not v.endswith('\n'): v+='\n'
    return v
t=re.sub(r'\{\{([a-z0-9-]+)\}\}', sub, t)
t=t.replace(bindir,'')
open(dest,'w').write(t)
