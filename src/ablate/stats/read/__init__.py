"""Reading a sweep: finding run directories (`runs`), loading them into `Run`s and a `Sweep` (`load`,
samples.jsonl in `samples`), a committed report's archive of its runs (`archive`), and the checks every
reader applies to what it reads (`validate`). Loading never raises on bad data: a problem is a note."""
