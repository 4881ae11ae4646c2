# Shell helpers shared by the package checks (sourced, not run).

# first_child PID: prints the first child process of PID once there is one (waits up to 10 s;
# prints nothing if none appears).
first_child() {
    local child=
    for _ in $(seq 1 100); do
        child=$(pgrep -P "$1" | head -n1 || true)
        [ -n "$child" ] && break
        sleep 0.1
    done
    echo "$child"
}
