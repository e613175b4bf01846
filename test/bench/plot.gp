# test/bench/plot.gp — the plot of test/bench/run.sh, run in the results dir.
# Left: every ratio (median, per-round range, target).  Right: the backend's
# private memory (RssAnon) during the memory runs.

set terminal pngcairo size 1500,680 font "DejaVu Sans,10" noenhanced
set output "bench.png"
set multiplot layout 1,2 title "lease_fence benchmark: medians of interleaved rounds (numbers in results.txt)" font ",12"

# -- ratios, horizontal bars --
set lmargin 44
set rmargin 2
set size 0.64, 1
set origin 0, 0
set title "ratios: time / time, or throughput / throughput"
set tmargin 4
set xlabel "ratio"
set xrange [0:*]
set yrange [-0.8:*] reverse
set ytics scale 0 font ",9"
set grid xtics
set key below horizontal
set bmargin 7
set style fill solid 0.5 border -1
set arrow 1 from 1, graph 0 to 1, graph 1 nohead dt 2 lc rgb "gray40"
plot "ratios.dat" using (0):1:(0):3:($1-0.35):($1+0.35):ytic(2) with boxxyerror lc rgb "#4477aa" title "median of per-round ratios", \
     "" using 3:1:4:5 with xerrorbars pt -1 lc rgb "black" title "per-round range", \
     "" using 6:1 with points pt 7 ps 1.3 lc rgb "#cc3311" title "target"

# -- memory --
unset ytics
set ytics auto font ",10"
set lmargin 10
set size 0.36, 1
set origin 0.64, 0
unset arrow 1
set title "backend's private memory (RssAnon) in the memory runs"
set xlabel "seconds"
set ylabel "MB"
set xrange [0:*]
set yrange [0:*] noreverse
set key inside top right
set bmargin 7
plot "rss_cycles.dat" using 1:($3/1024) with lines lw 2 title "acquire/release cycles", \
     "rss_updates.dat" using 1:($3/1024) with lines lw 2 title "fenced single-row UPDATEs"
unset multiplot
